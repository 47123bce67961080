"""The shop's tasks: plain Django Tasks, run by jobyard."""

try:
    from django.tasks import task  # Django >= 6
except ImportError:
    from django_tasks import task  # the backport, on Django 5.2

from .models import Order


@task(queue_name="emails", priority=10)
def send_receipt(order_id: int) -> dict:
    """Send the receipt of an order (here: mark it sent) and say what was sent."""
    order = Order.objects.get(pk=order_id)
    order.receipt_sent = True
    order.save(update_fields=["receipt_sent"])
    return {"order": order.pk, "item": order.item, "quantity": order.quantity}
