"""Stripe (webhook endpoints): ``Stripe-Signature: t=<ts>,v1=<hex HMAC of 't.body'>``, the whole
``whsec_`` string as the key; the event id is the body's ``id``.

Stripe publishes neither intervals ("exponential backoff ... up to three days") nor a timeout:
the stand-in schedule doubles from 1 min and ends at 3 days; timeout 10 s.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import ClassVar

from acklab.harness.wire.providers.base import Attempt, Example, Provider, ProviderProfile, Signer
from acklab.harness.wire.retry_policy import DAY, RetryPolicy
from acklab.harness.wire.signatures import STRIPE_LIST, SignatureList

LICENCE = "MIT, Copyright (c) 2014- Stripe, Inc."


class StripeSigner(Signer):
    """``t=<ts>,v1=<hex>``; Stripe's own deliveries also say who sends them and the body's charset."""

    scheme: ClassVar[str] = "stripe"
    derived: ClassVar[frozenset[str]] = frozenset({"stripe-signature"})
    rotation: ClassVar[SignatureList | None] = STRIPE_LIST

    def headers(self, attempt: Attempt, secret: str) -> dict[str, str]:
        signed = f"{attempt.timestamp}.".encode() + attempt.body
        digest = hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()
        return {
            "Content-Type": "application/json; charset=utf-8",
            "User-Agent": "Stripe/1.0 (+https://stripe.com/docs/webhooks)",
            "Stripe-Signature": f"t={attempt.timestamp},v1={digest}",
        }

    def signs_timestamp(self, secret: str) -> bool:
        return True


def _example(event: str) -> Example:
    return Example(
        "stripe",
        event,
        event_ids=("id",),
        object_id="data.object.id",
        unix_times=("created",),
        source=(
            "stripe/stripe-mock (the fixtures Stripe's SDK test suites run against), "
            "embedded/openapi/fixtures3.json at a7c7c338db2b: the event fixture as the envelope, "
            f"data.object the {event.rpartition('.')[0]} fixture, type set to the event's name"
        ),
        licence=LICENCE,
    )


PROVIDER = Provider(
    name="stripe",
    order=20,
    profile=ProviderProfile(
        scheme="stripe",
        name="Stripe (webhook endpoints)",
        event_id_header=None,  # the Event id lives in the body (body:id)
        signature_header="Stripe-Signature",
        signs_timestamp=True,
        tolerance_s=300,
        timeout_s=10.0,
        timeout_stand_in=True,
        schedule_s=(0, 60, 180, 420, 900, 1860, 3780, 7620, 15300, 30660, 61380, 122820, 259200),
        schedule_stand_in=True,
        note="intervals and timeout unpublished ('exponential backoff, up to three days'): stand-ins",
        sources=(
            "https://docs.stripe.com/webhooks",
            "https://github.com/stripe/stripe-python/blob/master/stripe/_webhook.py",
        ),
        retry=RetryPolicy(
            automatic=True,
            window_s=3 * DAY,
            keeps_delivery_id=True,  # the Event id in the body; no delivery-id header
            gives_up_after_s=3 * DAY,
            gives_up="stops retrying the event and may disable the endpoint (it emails before it does)",
            note="live mode: exponential backoff 'up to three days'; a manual resend from the Dashboard up to 15 days",
            sources=("https://docs.stripe.com/webhooks#retries",),
        ),
    ),
    signer=StripeSigner(),
    # The objects the lab's Stripe API returns follow this version of https://docs.stripe.com/api.
    api_version="2024-06-20",
    redacted_headers=frozenset({"stripe-signature"}),
    body_event_id="id",
    amount_fields=("data.object.amount", "data.object.amount_total", "data.object.amount_due"),
    examples=(
        _example("payment_intent.succeeded"),
        _example("checkout.session.completed"),
        _example("charge.succeeded"),
    ),
)
