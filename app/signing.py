"""Signing and verification of webhook deliveries, one pair of pure functions per scheme.

Facts per provider (header names, signed content, encodings, tolerances) follow the
provider documentation and reference libraries: Standard Webhooks (and Svix, which uses
the same scheme under ``svix-*`` headers), Stripe, GitHub, GitLab and Shopify. Every
comparison of secret-derived values is constant-time (``hmac.compare_digest`` on bytes).

Errors never echo a secret: they describe its shape only.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import time
from collections.abc import Mapping

WHSEC_PREFIX = "whsec_"


class SigningError(ValueError):
    """A secret cannot be used for the scheme (its shape is wrong)."""


class VerificationFailed(Exception):
    """A delivery's signature did not verify. ``reason`` is a stable code, ``detail`` is for people.

    Reasons: ``missing_signature``, ``malformed_signature``, ``invalid_signature``,
    ``stale_timestamp``, ``future_timestamp``.
    """

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


def decode_whsec(secret: str) -> bytes:
    """The HMAC key of a Standard Webhooks secret: base64-decode what follows ``whsec_``."""
    encoded = secret.removeprefix(WHSEC_PREFIX)
    try:
        # Reference libraries accept unpadded base64, so padding is optional here too.
        key = base64.b64decode(encoded + "=" * (-len(encoded) % 4), validate=True)
    except (binascii.Error, ValueError):
        raise SigningError(
            f"the secret is not a Standard Webhooks secret ({len(secret)} characters): "
            "expected 'whsec_' followed by base64"
        ) from None
    if not key:
        raise SigningError("the secret decodes to an empty key: expected 'whsec_' followed by base64")
    return key


def hmac_sha256(key: bytes, message: bytes) -> bytes:
    """The raw HMAC-SHA256 of `message` under `key`."""
    return hmac.new(key, message, hashlib.sha256).digest()


def lower_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """The headers by their lower-case names (HTTP header names are case-insensitive)."""
    return {name.lower(): value for name, value in headers.items()}


def is_unix_seconds(value: str) -> bool:
    """Whether a signed timestamp's text is whole Unix seconds (ASCII digits, at most 12)."""
    return value.isascii() and value.isdigit() and len(value) <= 12


def check_timestamp(timestamp: int, tolerance_s: int, now: float | None = None) -> None:
    """Refuse a signed timestamp further than ``tolerance_s`` from now, in either direction."""
    now = time.time() if now is None else now
    if timestamp < now - tolerance_s:
        raise VerificationFailed(
            "stale_timestamp",
            f"signed timestamp {timestamp} is {int(now - timestamp)} s old; the tolerance is "
            f"±{tolerance_s} s (re-sign the delivery, or check the sender's clock)",
        )
    if timestamp > now + tolerance_s:
        raise VerificationFailed(
            "future_timestamp",
            f"signed timestamp {timestamp} is {int(timestamp - now)} s in the future; the tolerance "
            f"is ±{tolerance_s} s (check the sender's clock)",
        )


# --- Standard Webhooks (and Svix) ---------------------------------------------------------


def standard_signature(secret: str, msg_id: str, timestamp: int, body: bytes) -> str:
    """``v1,<base64 HMAC-SHA256>`` over ``{msg_id}.{timestamp}.{body}`` with the decoded key."""
    digest = hmac_sha256(decode_whsec(secret), f"{msg_id}.{timestamp}.".encode() + body)
    return "v1," + base64.b64encode(digest).decode("ascii")


def _v1_signatures(header: str) -> list[bytes]:
    found = []
    for entry in header.split():
        version, _, encoded = entry.partition(",")
        if version != "v1":  # v1a (ed25519) and unknown versions are not ours to check
            continue
        try:
            found.append(base64.b64decode(encoded, validate=True))
        except (binascii.Error, ValueError):
            continue
    return found


def verify_standard(
    secret: str, headers: Mapping[str, str], body: bytes, *, tolerance_s: int = 300, now: float | None = None
) -> None:
    """Verify ``webhook-id``/``webhook-timestamp``/``webhook-signature`` (or their ``svix-`` twins).

    Several space-separated signatures are allowed (secret rotation); any ``v1`` match passes.
    """
    h = lower_headers(headers)
    prefix = "svix-" if "webhook-signature" not in h and "svix-signature" in h else "webhook-"
    msg_id, stamp, signatures = (h.get(prefix + name, "") for name in ("id", "timestamp", "signature"))
    missing = [
        prefix + n for n, v in (("id", msg_id), ("timestamp", stamp), ("signature", signatures)) if not v
    ]
    if missing:
        raise VerificationFailed("missing_signature", f"missing header(s): {', '.join(missing)}")
    if not is_unix_seconds(stamp):
        raise VerificationFailed(
            "malformed_signature", f"{prefix}timestamp must be integer Unix seconds, got {stamp[:40]!r}"
        )
    try:
        key = decode_whsec(secret)
    except SigningError:
        raise VerificationFailed(
            "invalid_signature", "a signature was sent but the configured secret is not a 'whsec_' secret"
        ) from None
    expected = hmac_sha256(key, f"{msg_id}.{stamp}.".encode() + body)
    candidates = _v1_signatures(signatures)
    if not candidates:
        raise VerificationFailed("malformed_signature", f"{prefix}signature holds no 'v1,<base64>' entry")
    if not any(hmac.compare_digest(expected, candidate) for candidate in candidates):
        raise VerificationFailed("invalid_signature", f"no {prefix}signature matches the body and the secret")
    check_timestamp(int(stamp), tolerance_s, now)


# --- Stripe -------------------------------------------------------------------------------


def stripe_signature_header(secret: str, timestamp: int, body: bytes) -> str:
    """``t=<ts>,v1=<hex>``: HMAC-SHA256 over ``{t}.{body}``; the key is the whole secret, UTF-8."""
    digest = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={digest}"


def verify_stripe(
    secret: str, headers: Mapping[str, str], body: bytes, *, tolerance_s: int = 300, now: float | None = None
) -> None:
    """Verify ``Stripe-Signature``. Unlike stripe-python, future timestamps are refused too."""
    header = lower_headers(headers).get("stripe-signature", "")
    if not header:
        raise VerificationFailed("missing_signature", "missing header: Stripe-Signature")
    stamps, signatures = [], []
    for item in header.split(","):
        key, _, value = item.strip().partition("=")
        if key == "t":
            stamps.append(value)
        elif key == "v1":  # v0 (test-mode fake) and other schemes are ignored, as Stripe says
            signatures.append(value.encode())
    if len(stamps) != 1 or not is_unix_seconds(stamps[0]):
        raise VerificationFailed("malformed_signature", "Stripe-Signature needs exactly one t=<unix seconds>")
    if not signatures:
        raise VerificationFailed("malformed_signature", "Stripe-Signature holds no v1= signature")
    expected = hmac.new(secret.encode(), f"{stamps[0]}.".encode() + body, hashlib.sha256).hexdigest().encode()
    if not any(hmac.compare_digest(expected, candidate) for candidate in signatures):
        raise VerificationFailed("invalid_signature", "no v1 signature matches the body and the secret")
    check_timestamp(int(stamps[0]), tolerance_s, now)


# --- GitHub -------------------------------------------------------------------------------


def github_signature(secret: str, body: bytes) -> str:
    """``sha256=<hex>``: HMAC-SHA256 over the raw body; no timestamp is signed."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def verify_github(
    secret: str, headers: Mapping[str, str], body: bytes, *, tolerance_s: int = 300, now: float | None = None
) -> None:
    """Verify ``X-Hub-Signature-256``. Replays can only be caught by X-GitHub-Delivery dedupe."""
    header = lower_headers(headers).get("x-hub-signature-256", "")
    if not header:
        raise VerificationFailed("missing_signature", "missing header: X-Hub-Signature-256")
    if not header.startswith("sha256="):
        raise VerificationFailed("malformed_signature", "X-Hub-Signature-256 must look like sha256=<hex>")
    if not hmac.compare_digest(github_signature(secret, body).encode(), header.encode()):
        raise VerificationFailed(
            "invalid_signature", "X-Hub-Signature-256 does not match the body and the secret"
        )


# --- GitLab -------------------------------------------------------------------------------


def verify_gitlab(
    secret: str, headers: Mapping[str, str], body: bytes, *, tolerance_s: int = 300, now: float | None = None
) -> None:
    """Verify ``X-Gitlab-Token`` (the secret verbatim) and, when sent, the Standard Webhooks signature.

    GitLab's signing token is a Standard Webhooks ``whsec_`` secret sent as
    ``webhook-id``/``webhook-timestamp``/``webhook-signature``. At least one must be present.
    """
    h = lower_headers(headers)
    token = h.get("x-gitlab-token")
    signed = "webhook-signature" in h
    if token is None and not signed:
        raise VerificationFailed("missing_signature", "missing header: X-Gitlab-Token (or webhook-signature)")
    if token is not None and not hmac.compare_digest(token.encode(), secret.encode()):
        raise VerificationFailed(
            "invalid_signature", "X-Gitlab-Token does not match the configured secret token"
        )
    if signed:
        verify_standard(secret, h, body, tolerance_s=tolerance_s, now=now)


# --- Shopify ------------------------------------------------------------------------------


def shopify_signature(secret: str, body: bytes) -> str:
    """Bare base64 HMAC-SHA256 over the raw body, keyed with the app's client secret."""
    return base64.b64encode(hmac_sha256(secret.encode(), body)).decode("ascii")


def verify_shopify(
    secret: str, headers: Mapping[str, str], body: bytes, *, tolerance_s: int = 300, now: float | None = None
) -> None:
    """Verify ``X-Shopify-Hmac-Sha256``; no timestamp is signed."""
    header = lower_headers(headers).get("x-shopify-hmac-sha256", "")
    if not header:
        raise VerificationFailed("missing_signature", "missing header: X-Shopify-Hmac-Sha256")
    try:
        sent = base64.b64decode(header, validate=True)
    except (binascii.Error, ValueError):
        raise VerificationFailed("malformed_signature", "X-Shopify-Hmac-Sha256 is not base64") from None
    if not hmac.compare_digest(hmac_sha256(secret.encode(), body), sent):
        raise VerificationFailed(
            "invalid_signature", "X-Shopify-Hmac-Sha256 does not match the body and the secret"
        )
