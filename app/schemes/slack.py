"""Slack (Events API): ``X-Slack-Signature: v0=<hex>``, HMAC-SHA256 over ``v0:{timestamp}:{body}``
with the app's signing secret, ``X-Slack-Request-Timestamp`` within the tolerance either way.
The event id is the body's (``event_id`` in Slack's bodies; the fixture's own ``id``)."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping

from acklab.app.schemes import Scheme
from acklab.app.signing import VerificationFailed, check_timestamp, is_unix_seconds, lower_headers


def signature(secret: str, timestamp: str, body: bytes) -> str:
    """``v0=`` + hex HMAC-SHA256 of ``v0:{timestamp}:{body}``, keyed with the signing secret."""
    return "v0=" + hmac.new(secret.encode(), f"v0:{timestamp}:".encode() + body, hashlib.sha256).hexdigest()


def verify_slack(
    secret: str, headers: Mapping[str, str], body: bytes, *, tolerance_s: int = 300, now: float | None = None
) -> None:
    """Verify ``X-Slack-Signature`` over the timestamp and the raw body (as Slack's SDK does,
    constant-time), then the timestamp's age."""
    h = lower_headers(headers)
    stamp, sent = h.get("x-slack-request-timestamp", ""), h.get("x-slack-signature", "")
    missing = [
        name
        for name, value in (("X-Slack-Request-Timestamp", stamp), ("X-Slack-Signature", sent))
        if not value
    ]
    if missing:
        raise VerificationFailed("missing_signature", f"missing header(s): {', '.join(missing)}")
    if not is_unix_seconds(stamp):
        raise VerificationFailed(
            "malformed_signature", "X-Slack-Request-Timestamp must be integer Unix seconds"
        )
    if not sent.startswith("v0="):
        raise VerificationFailed("malformed_signature", "X-Slack-Signature must look like v0=<hex>")
    if not hmac.compare_digest(signature(secret, stamp, body).encode(), sent.encode()):
        raise VerificationFailed(
            "invalid_signature", "X-Slack-Signature does not match the body and the secret"
        )
    check_timestamp(int(stamp), tolerance_s, now)


def sign(secret: str, event_id: str, body: bytes, timestamp: int) -> dict[str, str]:
    return {
        "X-Slack-Request-Timestamp": str(timestamp),
        "X-Slack-Signature": signature(secret, str(timestamp), body),
    }


SCHEME = Scheme("slack", verify_slack, sign, (), "X-Slack-Signature", ("X-Slack-Request-Timestamp",))
