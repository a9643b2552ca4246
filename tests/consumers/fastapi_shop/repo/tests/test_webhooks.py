import base64
import hashlib
import hmac
import json
import os

import pytest
from fastapi.testclient import TestClient

from shop import hooks
from shop.main import app


@pytest.fixture
def shipped(monkeypatch):
    asked = []
    monkeypatch.setattr(hooks, "ship", lambda order_id, lines, **kw: asked.append(order_id) or f"shp_{order_id}")
    return asked


def deliver(client, order, *, topic="orders/paid", secret=None):
    body = json.dumps(order).encode()
    key = (secret or os.environ["SHOPIFY_WEBHOOK_SECRET"]).encode()
    signature = base64.b64encode(hmac.new(key, body, hashlib.sha256).digest()).decode()
    headers = {"X-Shopify-Topic": topic, "X-Shopify-Hmac-Sha256": signature, "Content-Type": "application/json"}
    return client.post("/webhooks/shopify", content=body, headers=headers)


def test_a_paid_order_is_shipped_once(shipped):
    with TestClient(app) as client:
        order = {"id": 4401, "line_items": [{"sku": "MUG-1", "quantity": 2}]}
        assert deliver(client, order).status_code == 200
        assert deliver(client, order).status_code == 200
    assert shipped == ["4401"]


def test_a_forged_delivery_is_refused(shipped):
    with TestClient(app) as client:
        assert deliver(client, {"id": 4402}, secret="shpss_someone_else").status_code == 401
    assert shipped == []
