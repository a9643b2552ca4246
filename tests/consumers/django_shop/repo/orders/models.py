from django.db import models


class Fulfillment(models.Model):
    """One paid checkout, shipped: at most one per Stripe event."""

    event_id = models.CharField(max_length=255, unique=True)
    order_id = models.CharField(max_length=64, db_index=True)
    amount_cents = models.PositiveIntegerField()
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"{self.order_id} ({self.event_id})"
