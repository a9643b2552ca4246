"""Shopify (HTTPS webhook subscriptions): base64 HMAC-SHA256 of the raw body with the app's client
secret in ``X-Shopify-Hmac-Sha256``; ``X-Shopify-Webhook-Id`` names the delivery.

"8 retries over 4 hours, exponential backoff", intervals unpublished: the stand-in doubles from
1 min and ends at 4 h (9 attempts in all).
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any, ClassVar

from acklab.harness.wire.providers.base import (
    Attempt,
    Example,
    Provider,
    ProviderProfile,
    Signer,
    hmac_sha256,
)
from acklab.harness.wire.retry_policy import HOUR, RetryPolicy

SOURCE = (
    "Shopify/shopify_python_api (Shopify's Python SDK), test/fixtures/order.json at 307fa92c92e0: "
    "the order object, which is the body of an orders/* webhook"
)
LICENCE = 'MIT, Copyright (c) 2011 "JadedPixel inc."'


def topic(document: Mapping[str, Any]) -> str:
    """``X-Shopify-Topic``: the body's type with ``/`` where event types use ``.`` (orders/create)."""
    value = document.get("type")
    return value.replace(".", "/") if isinstance(value, str) else "webhook"


class ShopifySigner(Signer):
    """The body's HMAC, and Shopify's delivery headers (topic, webhook and event ids, shop, API
    version, trigger time)."""

    scheme: ClassVar[str] = "shopify"
    derived: ClassVar[frozenset[str]] = frozenset(
        {"x-shopify-hmac-sha256", "x-shopify-webhook-id", "x-shopify-event-id", "x-shopify-topic"}
    )

    def headers(self, attempt: Attempt, secret: str) -> dict[str, str]:
        digest = base64.b64encode(hmac_sha256(secret.encode(), attempt.body)).decode()
        headers = {
            "User-Agent": "Shopify-Captain-Hook",
            "X-Shopify-Topic": attempt.event_type,
            "X-Shopify-Hmac-Sha256": digest,
            "X-Shopify-Shop-Domain": "acklab.myshopify.com",
            "X-Shopify-API-Version": "2025-01",
            "X-Shopify-Webhook-Id": attempt.event_id,
            "X-Shopify-Event-Id": attempt.event_id,
        }
        if attempt.triggered_at:
            headers["X-Shopify-Triggered-At"] = attempt.triggered_at
        return headers


def _example(event: str) -> Example:
    return Example(
        "shopify",
        event,
        event_ids=("token",),
        object_id="id",
        iso_times=("created_at", "updated_at"),
        event_type=event,
        source=SOURCE,
        licence=LICENCE,
    )


PROVIDER = Provider(
    name="shopify",
    order=50,
    profile=ProviderProfile(
        scheme="shopify",
        name="Shopify (HTTPS webhook subscriptions)",
        event_id_header="X-Shopify-Webhook-Id",
        signature_header="X-Shopify-Hmac-Sha256",
        signs_timestamp=False,
        tolerance_s=None,
        timeout_s=5.0,
        timeout_stand_in=False,
        schedule_s=(0, 60, 180, 420, 900, 1860, 3780, 7620, 14400),
        schedule_stand_in=True,
        note="'8 retries over 4 hours, exponential backoff', intervals unpublished: stand-in doubling from 1 min",
        sources=(
            "https://shopify.dev/docs/apps/build/webhooks/subscribe/https",
            "https://shopify.dev/docs/apps/build/webhooks/verify-deliveries",
        ),
        retry=RetryPolicy(
            automatic=True,
            window_s=4 * HOUR,
            keeps_delivery_id=True,  # X-Shopify-Webhook-Id names the delivery across its retries
            gives_up_after_s=4 * HOUR,
            gives_up="deletes the subscription (one created with the Admin API) after 8 consecutive failures",
            note="'8 times over 4 hours' since 2024-09-10 (earlier: 19 times over 48 hours)",
            sources=("https://shopify.dev/docs/apps/build/webhooks/subscribe/https",),
        ),
    ),
    signer=ShopifySigner(),
    event_type_header="X-Shopify-Topic",
    redacted_headers=frozenset({"x-shopify-hmac-sha256"}),
    amount_fields=("total_price", "current_total_price", "subtotal_price"),
    event_type=topic,
    examples=(_example("orders/create"), _example("orders/paid")),
)
