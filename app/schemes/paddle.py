"""Paddle Billing: ``Paddle-Signature: ts=<unix>;h1=<hex>``, HMAC-SHA256 over ``{ts}:{body}`` with
the destination's secret key; several ``h1`` are allowed (a secret being rotated), any match
passes. The event id is the body's (``event_id`` in Paddle's bodies; the fixture's own ``id``)."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping

from acklab.app.schemes import Scheme
from acklab.app.signing import VerificationFailed, check_timestamp, is_unix_seconds, lower_headers


def digest(secret: str, timestamp: str, body: bytes) -> str:
    """The hex HMAC-SHA256 of ``{ts}:{body}`` keyed with the secret key."""
    return hmac.new(secret.encode(), f"{timestamp}:".encode() + body, hashlib.sha256).hexdigest()


def verify_paddle(
    secret: str, headers: Mapping[str, str], body: bytes, *, tolerance_s: int = 300, now: float | None = None
) -> None:
    """Verify ``Paddle-Signature`` (exactly one ``ts``, one or more ``h1``), then the timestamp's age."""
    header = lower_headers(headers).get("paddle-signature", "")
    if not header:
        raise VerificationFailed("missing_signature", "missing header: Paddle-Signature")
    stamps, signatures = [], []
    for item in header.split(";"):
        key, _, value = item.strip().partition("=")
        if key == "ts":
            stamps.append(value)
        elif key == "h1":
            signatures.append(value.encode())
    if len(stamps) != 1 or not is_unix_seconds(stamps[0]):
        raise VerificationFailed(
            "malformed_signature", "Paddle-Signature needs exactly one ts=<unix seconds>"
        )
    if not signatures:
        raise VerificationFailed("malformed_signature", "Paddle-Signature holds no h1= signature")
    expected = digest(secret, stamps[0], body).encode()
    if not any(hmac.compare_digest(expected, candidate) for candidate in signatures):
        raise VerificationFailed("invalid_signature", "no h1 signature matches the body and the secret")
    check_timestamp(int(stamps[0]), tolerance_s, now)


def sign(secret: str, event_id: str, body: bytes, timestamp: int) -> dict[str, str]:
    return {"Paddle-Signature": f"ts={timestamp};h1={digest(secret, str(timestamp), body)}"}


SCHEME = Scheme("paddle", verify_paddle, sign, (), "Paddle-Signature")
