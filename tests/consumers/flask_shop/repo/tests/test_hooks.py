import json
import os
from datetime import UTC, datetime

import pytest
from standardwebhooks import Webhook

from shop import hooks
from shop.app import app
from shop.db import Session, Shipment


@pytest.fixture
def receipts(monkeypatch):
    sent = []
    monkeypatch.setattr(hooks, "send_receipt", lambda *args: sent.append(args))
    return sent


def deliver(message_id, body, secret=None):
    payload = json.dumps(body)
    signer = Webhook(secret or os.environ["SHOP_WEBHOOK_SECRET"])
    now = datetime.now(tz=UTC)
    headers = {
        "webhook-id": message_id,
        "webhook-timestamp": str(int(now.timestamp())),
        "webhook-signature": signer.sign(message_id, now, payload),
        "content-type": "application/json",
    }
    return app.test_client().post("/hooks/payments", data=payload, headers=headers)


def paid(order_id):
    return {"type": "order.paid", "data": {"order_id": order_id, "email": "b@example.test", "amount_cents": 990}}


def test_a_paid_order_ships_and_mails_once(receipts):
    assert deliver("msg_1", paid("o1")).status_code == 200
    assert deliver("msg_1", paid("o1")).status_code == 200
    with Session() as session:
        assert session.query(Shipment).filter_by(order_id="o1").count() == 1
    assert receipts == [("o1", "b@example.test", 990)]


def test_a_forged_delivery_is_refused(receipts):
    assert deliver("msg_2", paid("o2"), secret="whsec_" + "b3RoZXItc2VjcmV0LW9mLXNvbWVvbmU=").status_code == 400
    assert receipts == []
