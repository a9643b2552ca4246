"""Stripe: ``Stripe-Signature``; the event id is the body's ``id``."""

from __future__ import annotations

from acklab.app.schemes import Scheme
from acklab.app.signing import stripe_signature_header, verify_stripe


def sign(secret: str, event_id: str, body: bytes, timestamp: int) -> dict[str, str]:
    return {"Stripe-Signature": stripe_signature_header(secret, timestamp, body)}


SCHEME = Scheme("stripe", verify_stripe, sign, (), "Stripe-Signature")
