"""Sender-side signing, one small signer per scheme (facts in `harness.providers`).

Each signer turns one delivery attempt into the headers that provider would send. A retry
is signed again: schemes that sign a timestamp get a fresh one per attempt, exactly like
the real sender, while the body bytes and the event id stay identical.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from dataclasses import dataclass
from typing import ClassVar

from acklab.harness.errors import SpecError

# Headers whose values are (or are derived from) a secret; never written to evidence.
REDACTED_HEADERS = frozenset(
    {
        "authorization",
        "webhook-signature",
        "stripe-signature",
        "x-hub-signature",
        "x-hub-signature-256",
        "x-gitlab-token",
        "x-shopify-hmac-sha256",
        "svix-signature",
    }
)
REDACTED = "[redacted]"


@dataclass(frozen=True)
class Attempt:
    """What one delivery attempt signs: the event, the exact body bytes, the attempt time."""

    event_id: str
    event_type: str
    body: bytes
    timestamp: int  # the attempt's Unix seconds (not the event's time)
    request_uuid: str  # per-request id for senders that have one (GitLab's webhook UUID)


def redact(headers: dict[str, str]) -> dict[str, str]:
    """The headers with every signature or token value replaced by ``[redacted]``."""
    return {k: (REDACTED if k.lower() in REDACTED_HEADERS else v) for k, v in headers.items()}


def _hmac(key: bytes, content: bytes) -> bytes:
    return hmac.new(key, content, hashlib.sha256).digest()


def whsec_key(secret: str) -> bytes:
    """The HMAC key of a Standard Webhooks secret: the base64-decoded part after ``whsec_``."""
    try:
        return base64.b64decode(secret.removeprefix("whsec_"), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise SpecError(
            "a standard/gitlab signing secret must be 'whsec_' + base64 (Standard Webhooks); "
            f"got a value of {len(secret)} characters that is not base64 after the prefix"
        ) from exc


class Signer:
    """Produces the headers of one attempt; one subclass per scheme."""

    scheme: ClassVar[str]

    def headers(self, attempt: Attempt, secret: str) -> dict[str, str]:
        raise NotImplementedError

    def check_secret(self, secret: str) -> None:
        """Raise SpecError when `secret` cannot be used by this scheme."""
        if not secret:
            raise SpecError(f"signing.secret is empty; scheme {self.scheme!r} needs a secret")


def _standard_headers(attempt: Attempt, secret: str) -> dict[str, str]:
    signed = f"{attempt.event_id}.{attempt.timestamp}.".encode() + attempt.body
    signature = base64.b64encode(_hmac(whsec_key(secret), signed)).decode()
    return {
        "webhook-id": attempt.event_id,
        "webhook-timestamp": str(attempt.timestamp),
        "webhook-signature": f"v1,{signature}",
    }


@dataclass(frozen=True)
class StandardSigner(Signer):
    """Standard Webhooks: HMAC-SHA256 over ``id.timestamp.body``, base64, ``v1,`` prefix."""

    scheme: ClassVar[str] = "standard"

    def headers(self, attempt: Attempt, secret: str) -> dict[str, str]:
        return _standard_headers(attempt, secret)

    def check_secret(self, secret: str) -> None:
        super().check_secret(secret)
        whsec_key(secret)


@dataclass(frozen=True)
class StripeSigner(Signer):
    """Stripe: ``t=<ts>,v1=<hex HMAC of 't.body'>``, the whole ``whsec_`` string as key."""

    scheme: ClassVar[str] = "stripe"

    def headers(self, attempt: Attempt, secret: str) -> dict[str, str]:
        signed = f"{attempt.timestamp}.".encode() + attempt.body
        digest = hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()
        return {"Stripe-Signature": f"t={attempt.timestamp},v1={digest}"}


@dataclass(frozen=True)
class GitHubSigner(Signer):
    """GitHub: ``sha256=<hex HMAC of the body>``; the delivery GUID names the event."""

    scheme: ClassVar[str] = "github"

    def headers(self, attempt: Attempt, secret: str) -> dict[str, str]:
        digest = hmac.new(secret.encode(), attempt.body, hashlib.sha256).hexdigest()
        return {
            "X-GitHub-Delivery": attempt.event_id,
            "X-GitHub-Event": attempt.event_type,
            "X-GitHub-Hook-ID": "acklab",
            "User-Agent": "GitHub-Hookshot/acklab",
            "X-Hub-Signature-256": f"sha256={digest}",
        }


@dataclass(frozen=True)
class GitLabSigner(Signer):
    """GitLab: Standard Webhooks signing with a ``whsec_`` signing token, else the legacy token."""

    scheme: ClassVar[str] = "gitlab"

    def headers(self, attempt: Attempt, secret: str) -> dict[str, str]:
        headers = {
            "Idempotency-Key": attempt.event_id,
            "X-Gitlab-Event": f"{attempt.event_type} Hook",
            "X-Gitlab-Event-UUID": attempt.event_id,
            "X-Gitlab-Webhook-UUID": attempt.request_uuid,
            "User-Agent": "GitLab/acklab",
        }
        if secret.startswith("whsec_"):
            headers.update(_standard_headers(attempt, secret))
        else:
            headers["X-Gitlab-Token"] = secret
        return headers


@dataclass(frozen=True)
class ShopifySigner(Signer):
    """Shopify: base64 HMAC-SHA256 of the raw body with the app's client secret."""

    scheme: ClassVar[str] = "shopify"

    def headers(self, attempt: Attempt, secret: str) -> dict[str, str]:
        digest = base64.b64encode(_hmac(secret.encode(), attempt.body)).decode()
        return {
            "X-Shopify-Hmac-Sha256": digest,
            "X-Shopify-Webhook-Id": attempt.event_id,
            "X-Shopify-Event-Id": attempt.event_id,
            "X-Shopify-Topic": attempt.event_type.replace(".", "/"),
            "X-Shopify-Shop-Domain": "acklab.myshopify.com",
        }


@dataclass(frozen=True)
class Unsigned(Signer):
    """No signature at all (``scheme: none``)."""

    scheme: ClassVar[str] = "none"

    def headers(self, attempt: Attempt, secret: str) -> dict[str, str]:
        return {}

    def check_secret(self, secret: str) -> None:
        return None


SIGNERS: dict[str, Signer] = {
    s.scheme: s
    for s in (StandardSigner(), StripeSigner(), GitHubSigner(), GitLabSigner(), ShopifySigner(), Unsigned())
}


def signs_timestamp(scheme: str, secret: str) -> bool:
    """Whether a signature of `scheme` covers the attempt's timestamp (replay: stale check)."""
    if scheme == "gitlab":
        return secret.startswith("whsec_")
    return scheme in ("standard", "stripe")


def foreign_secret(scheme: str, entropy: bytes) -> str:
    """Another valid-looking secret of the same format: a signature with it must be rejected."""
    if scheme in ("standard", "gitlab"):
        return "whsec_" + base64.b64encode(entropy[:24]).decode()
    return "whsec_" + entropy.hex()
