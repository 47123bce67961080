"""An order, and whether its receipt went out."""

from django.db import models


class Order(models.Model):
    """One order; ``receipt_task`` is the id of the task that sends its receipt."""

    item = models.CharField(max_length=100)
    quantity = models.PositiveIntegerField(default=1)
    receipt_task = models.CharField(max_length=200, blank=True, default="")
    receipt_sent = models.BooleanField(default=False)
