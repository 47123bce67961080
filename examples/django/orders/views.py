"""Placing an order enqueues its receipt in the same transaction: no receipt for an order that
was rolled back, and no order without its receipt."""

import json

from django.db import transaction
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST

from .models import Order
from .tasks import send_receipt


@csrf_exempt  # an API endpoint of the example, called by its tests
@require_POST
def place_order(request: HttpRequest) -> JsonResponse:
    """POST item=...&quantity=...; ``fail=1`` fails after the enqueue, inside the transaction."""
    with transaction.atomic():
        order = Order.objects.create(
            item=request.POST["item"], quantity=int(request.POST.get("quantity", 1))
        )
        result = send_receipt.enqueue(order.pk)
        if request.POST.get("fail") == "1":
            raise RuntimeError("the payment failed after the receipt was enqueued")
    # On commit (or inside it, with the transactional option) the task has its id now.
    Order.objects.filter(pk=order.pk).update(receipt_task=result.id)
    return JsonResponse({"order": order.pk, "task": result.id}, status=201)


@require_GET
def order(request: HttpRequest, order_id: int) -> JsonResponse:
    """The order and its receipt task's result, as the framework reports it."""
    found = Order.objects.get(pk=order_id)
    body = {"order": found.pk, "receipt_sent": found.receipt_sent, "task": found.receipt_task}
    if found.receipt_task:
        result = send_receipt.get_result(found.receipt_task)
        body["status"] = str(result.status)
        body["return_value"] = result.return_value if result.status == "SUCCESSFUL" else None
    return JsonResponse(json.loads(json.dumps(body)))
