"""Stripe tells the shop a checkout was paid: ship the order and mail the receipt."""

import stripe
from django.conf import settings
from django.core.mail import send_mail
from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from .models import Fulfillment


def mail_receipt(order_id: str, email: str, amount_cents: int) -> None:
    send_mail(
        f"Your receipt for order {order_id}",
        f"We received {amount_cents / 100:.2f} for order {order_id}. It ships today.",
        settings.DEFAULT_FROM_EMAIL,
        [email],
    )


@csrf_exempt
@require_POST
def stripe_webhook(request: HttpRequest) -> HttpResponse:
    try:
        event = stripe.Webhook.construct_event(
            request.body, request.headers.get("Stripe-Signature", ""), settings.STRIPE_WEBHOOK_SECRET
        )
    except (ValueError, stripe.SignatureVerificationError):
        return HttpResponse(status=400)
    if event["type"] != "checkout.session.completed":
        return HttpResponse(status=200)
    checkout = event["data"]["object"]
    order_id = checkout["metadata"]["order_id"]
    with transaction.atomic():
        # The row first: a redelivery, or a concurrent copy of this one, finds it (or loses the
        # insert) and mails nothing; the receipt goes only once the row is committed.
        _, created = Fulfillment.objects.get_or_create(
            event_id=event["id"], defaults={"order_id": order_id, "amount_cents": checkout["amount_total"]}
        )
        if created:
            email = checkout["customer_details"]["email"]
            transaction.on_commit(lambda: mail_receipt(order_id, email, checkout["amount_total"]))
    return HttpResponse(status=200)
