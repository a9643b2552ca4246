import hashlib
import hmac
import json
import time

import pytest
from django.test import Client

from orders.models import Fulfillment
from tests.conftest import SECRET


def paid(event_id: str, order_id: str, *, kind: str = "checkout.session.completed") -> dict:
    return {
        "id": event_id,
        "object": "event",
        "type": kind,
        "data": {
            "object": {
                "id": f"cs_test_{order_id}",
                "object": "checkout.session",
                "amount_total": 1200,
                "currency": "eur",
                "customer_details": {"email": "buyer@example.test"},
                "metadata": {"order_id": order_id},
            }
        },
    }


def deliver(event: dict, secret: str = SECRET):
    body = json.dumps(event)
    stamp = int(time.time())
    signature = hmac.new(secret.encode(), f"{stamp}.{body}".encode(), hashlib.sha256).hexdigest()
    return Client().post(
        "/webhooks/stripe",
        data=body,
        content_type="application/json",
        headers={"Stripe-Signature": f"t={stamp},v1={signature}"},
    )


pytestmark = pytest.mark.django_db(transaction=True)  # the receipt goes on commit


def test_a_paid_checkout_is_fulfilled_and_mailed_once(mailoutbox):
    assert deliver(paid("evt_1", "o1")).status_code == 200
    assert Fulfillment.objects.filter(event_id="evt_1").count() == 1
    [receipt] = mailoutbox
    assert "o1" in receipt.subject
    assert receipt.to == ["buyer@example.test"]


def test_a_redelivery_ships_nothing_more(mailoutbox):
    deliver(paid("evt_2", "o2"))
    assert deliver(paid("evt_2", "o2")).status_code == 200
    assert Fulfillment.objects.filter(event_id="evt_2").count() == 1
    assert len(mailoutbox) == 1


def test_a_delivery_signed_with_another_secret_is_refused(mailoutbox):
    assert deliver(paid("evt_3", "o3"), secret="whsec_someone_else").status_code == 400
    assert not Fulfillment.objects.exists()
    assert mailoutbox == []


def test_other_events_are_acknowledged_and_ignored():
    assert deliver(paid("evt_4", "o4", kind="checkout.session.expired")).status_code == 200
    assert not Fulfillment.objects.exists()
