"""Standard Webhooks (and Svix, the same scheme under ``svix-*`` headers)."""

from __future__ import annotations

from acklab.app.schemes import Scheme
from acklab.app.signing import decode_whsec, standard_signature, verify_standard


def sign(secret: str, event_id: str, body: bytes, timestamp: int) -> dict[str, str]:
    return {
        "webhook-id": event_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": standard_signature(secret, event_id, timestamp, body),
    }


SCHEME = Scheme(
    "standard",
    verify_standard,
    sign,
    ("webhook-id", "svix-id"),
    "webhook-signature",
    ("webhook-id", "webhook-timestamp"),
    check_secret=decode_whsec,
)
