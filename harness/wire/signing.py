"""Sender-side signing, one small signer per scheme (facts in `harness.wire.providers`).

Each signer turns one delivery attempt into the headers that provider would send. A retry
is signed again: schemes that sign a timestamp get a fresh one per attempt, exactly like
the real sender, while the body bytes and the event id stay identical.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import ClassVar

from acklab.evidence.redaction import REDACTED, known
from acklab.harness.errors import SpecError
from acklab.harness.wire.signatures import check_asymmetric, is_asymmetric, sign_v1a

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
        "x-slack-signature",
    }
)


@dataclass(frozen=True)
class Attempt:
    """What one delivery attempt signs: the event, the exact body bytes, the attempt time."""

    event_id: str
    event_type: str  # the provider's event-type header value (delivery.event_type, or from the body)
    body: bytes
    timestamp: int  # the attempt's Unix seconds (not the event's time)
    request_uuid: str  # per-request id for senders that have one (GitLab's webhook UUID)
    triggered_at: str = ""  # when the event was created (ISO-8601; Shopify's X-Shopify-Triggered-At)


def redact_headers(headers: Mapping[str, str], also: Iterable[str] = ()) -> dict[str, str]:
    """The headers as records show them: signature and token values, and those of the headers
    named in `also` (a spec's own ``headers:``), as ``[redacted]``; every other value through
    the process's redaction (`acklab.evidence.redaction`)."""
    hidden = REDACTED_HEADERS | {name.lower() for name in also}
    redactor = known()
    return {k: (REDACTED if k.lower() in hidden else redactor.text(v)) for k, v in headers.items()}


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
    # Headers derived from the event, the attempt or the secret: a spec's ``headers:`` may not
    # set them (the event type has its own field, delivery.event_type). The others a provider
    # sends (User-Agent, instance or shop names) a spec may override.
    derived: ClassVar[frozenset[str]] = frozenset()

    def headers(self, attempt: Attempt, secret: str) -> dict[str, str]:
        raise NotImplementedError

    def check_secret(self, secret: str) -> None:
        """Raise SpecError when `secret` cannot be used by this scheme."""
        if not secret:
            raise SpecError(f"signing.secret is empty; scheme {self.scheme!r} needs a secret")


def _standard_headers(attempt: Attempt, secret: str) -> dict[str, str]:
    signed = f"{attempt.event_id}.{attempt.timestamp}.".encode() + attempt.body
    if is_asymmetric(secret):  # whsk_: Ed25519, verified with the whpk_ public key
        signature = sign_v1a(secret, signed)
    else:
        signature = "v1," + base64.b64encode(_hmac(whsec_key(secret), signed)).decode()
    return {
        "webhook-id": attempt.event_id,
        "webhook-timestamp": str(attempt.timestamp),
        "webhook-signature": signature,
    }


_STANDARD = frozenset({"webhook-id", "webhook-timestamp", "webhook-signature"})


@dataclass(frozen=True)
class StandardSigner(Signer):
    """Standard Webhooks: HMAC-SHA256 over ``id.timestamp.body``, base64, ``v1,`` prefix; with a
    ``whsk_`` secret Ed25519, ``v1a,`` prefix (`harness.wire.signatures`)."""

    scheme: ClassVar[str] = "standard"
    derived: ClassVar[frozenset[str]] = _STANDARD

    def headers(self, attempt: Attempt, secret: str) -> dict[str, str]:
        return _standard_headers(attempt, secret)

    def check_secret(self, secret: str) -> None:
        super().check_secret(secret)
        if is_asymmetric(secret):
            check_asymmetric(secret)
        else:
            whsec_key(secret)


@dataclass(frozen=True)
class StripeSigner(Signer):
    """Stripe: ``t=<ts>,v1=<hex HMAC of 't.body'>``, the whole ``whsec_`` string as key.

    Stripe's own deliveries also say who sends them and the body's charset.
    """

    scheme: ClassVar[str] = "stripe"
    derived: ClassVar[frozenset[str]] = frozenset({"stripe-signature"})

    def headers(self, attempt: Attempt, secret: str) -> dict[str, str]:
        signed = f"{attempt.timestamp}.".encode() + attempt.body
        digest = hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()
        return {
            "Content-Type": "application/json; charset=utf-8",
            "User-Agent": "Stripe/1.0 (+https://stripe.com/docs/webhooks)",
            "Stripe-Signature": f"t={attempt.timestamp},v1={digest}",
        }


# One hook's deliveries all carry the same hook id and installation target, as on GitHub.
GITHUB_HOOK_ID = "419283700"
GITHUB_TARGET_ID = "601284512"


@dataclass(frozen=True)
class GitHubSigner(Signer):
    """GitHub: both signatures (``sha256=`` and the legacy ``sha1=``, hex HMACs of the body) and
    the delivery headers GitHub sends; the delivery GUID names the event (a redelivery keeps it)."""

    scheme: ClassVar[str] = "github"
    derived: ClassVar[frozenset[str]] = frozenset(
        {"x-github-delivery", "x-github-event", "x-hub-signature", "x-hub-signature-256"}
    )

    def headers(self, attempt: Attempt, secret: str) -> dict[str, str]:
        key = secret.encode()
        return {
            "User-Agent": "GitHub-Hookshot/ac1ab00",
            "X-GitHub-Delivery": attempt.event_id,
            "X-GitHub-Event": attempt.event_type,
            "X-GitHub-Hook-ID": GITHUB_HOOK_ID,
            "X-GitHub-Hook-Installation-Target-Type": "repository",
            "X-GitHub-Hook-Installation-Target-ID": GITHUB_TARGET_ID,
            "X-Hub-Signature": "sha1=" + hmac.new(key, attempt.body, hashlib.sha1).hexdigest(),
            "X-Hub-Signature-256": "sha256=" + hmac.new(key, attempt.body, hashlib.sha256).hexdigest(),
        }


@dataclass(frozen=True)
class GitLabSigner(Signer):
    """GitLab: Standard Webhooks signing with a ``whsec_`` signing token, else the legacy token;
    and GitLab's delivery headers (event, event UUID, idempotency key, per-request UUID, instance)."""

    scheme: ClassVar[str] = "gitlab"
    derived: ClassVar[frozenset[str]] = _STANDARD | frozenset(
        {
            "idempotency-key",
            "x-gitlab-event",
            "x-gitlab-event-uuid",
            "x-gitlab-webhook-uuid",
            "x-gitlab-token",
        }
    )

    def headers(self, attempt: Attempt, secret: str) -> dict[str, str]:
        headers = {
            "User-Agent": "GitLab/17.11.0-acklab",
            "Idempotency-Key": attempt.event_id,
            "X-Gitlab-Event": attempt.event_type,
            "X-Gitlab-Event-UUID": attempt.event_id,
            "X-Gitlab-Webhook-UUID": attempt.request_uuid,
            "X-Gitlab-Instance": "https://gitlab.example.com",
        }
        if secret.startswith("whsec_"):
            headers.update(_standard_headers(attempt, secret))
        else:
            headers["X-Gitlab-Token"] = secret
        return headers


@dataclass(frozen=True)
class ShopifySigner(Signer):
    """Shopify: base64 HMAC-SHA256 of the raw body with the app's client secret, and Shopify's
    delivery headers (topic, webhook and event ids, shop, API version, trigger time)."""

    scheme: ClassVar[str] = "shopify"
    derived: ClassVar[frozenset[str]] = frozenset(
        {"x-shopify-hmac-sha256", "x-shopify-webhook-id", "x-shopify-event-id", "x-shopify-topic"}
    )

    def headers(self, attempt: Attempt, secret: str) -> dict[str, str]:
        digest = base64.b64encode(_hmac(secret.encode(), attempt.body)).decode()
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


@dataclass(frozen=True)
class SlackSigner(Signer):
    """Slack: ``v0=`` + hex HMAC-SHA256 of ``v0:{timestamp}:{body}`` with the signing secret, and the
    timestamp in ``X-Slack-Request-Timestamp``."""

    scheme: ClassVar[str] = "slack"
    derived: ClassVar[frozenset[str]] = frozenset({"x-slack-signature", "x-slack-request-timestamp"})

    def headers(self, attempt: Attempt, secret: str) -> dict[str, str]:
        signed = f"v0:{attempt.timestamp}:".encode() + attempt.body
        digest = hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()
        return {
            "User-Agent": "Slackbot 1.0 (+https://api.slack.com/robots)",
            "X-Slack-Request-Timestamp": str(attempt.timestamp),
            "X-Slack-Signature": f"v0={digest}",
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
    for s in (
        StandardSigner(),
        StripeSigner(),
        GitHubSigner(),
        GitLabSigner(),
        ShopifySigner(),
        SlackSigner(),
        Unsigned(),
    )
}


def signs_timestamp(scheme: str, secret: str) -> bool:
    """Whether a signature of `scheme` covers the attempt's timestamp (replay: stale check)."""
    if scheme == "gitlab":
        return secret.startswith("whsec_")
    return scheme in ("standard", "stripe", "slack")


def foreign_secret(scheme: str, entropy: bytes, like: str = "") -> str:
    """Another valid-looking secret of the same format as `like`: a signature with it must be rejected."""
    if scheme == "standard" and is_asymmetric(like):
        return "whsk_" + base64.b64encode(hashlib.sha256(entropy).digest()).decode()
    if scheme in ("standard", "gitlab"):
        return "whsec_" + base64.b64encode(entropy[:24]).decode()
    return "whsec_" + entropy.hex()
