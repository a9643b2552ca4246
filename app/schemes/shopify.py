"""Shopify: ``X-Shopify-Hmac-Sha256`` over the body; ``X-Shopify-Webhook-Id`` names the delivery."""

from __future__ import annotations

from acklab.app.schemes import Scheme
from acklab.app.signing import shopify_signature, verify_shopify


def sign(secret: str, event_id: str, body: bytes, timestamp: int) -> dict[str, str]:
    return {
        "X-Shopify-Hmac-Sha256": shopify_signature(secret, body),
        "X-Shopify-Webhook-Id": event_id,
        "X-Shopify-Topic": "orders/paid",
    }


SCHEME = Scheme(
    "shopify",
    verify_shopify,
    sign,
    ("X-Shopify-Webhook-Id",),
    "X-Shopify-Hmac-Sha256",
    ("X-Shopify-Webhook-Id",),
    timestamped=False,
)
