"""What one provider record holds: how it signs, times out and retries, which headers it sends and
which of them carry secrets, where its event id and amount live, and its published example payloads.

Every table that once listed providers one by one (profiles, signers, redacted headers, event-type
headers, amount fields, init's examples) is now a lookup into `Provider` records
(`harness.wire.providers.PROVIDERS`); a new provider is one module of that package, one example
payload in ``harness/init/payloads/``, the fixture's verifier (``app/schemes/``) and one name in the
target schema's ``signing.scheme``.

Where a provider publishes no value the profile says so (``*_stand_in``) and uses a documented
stand-in instead, so a verdict never rests on a number presented as fact. Schedules run
time-compressed: cumulative offsets are divided by a factor, so order and count are preserved;
the factor is recorded in every incident.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from acklab.harness.errors import SpecError
from acklab.harness.wire.retry_policy import RetryPolicy
from acklab.harness.wire.signatures import SignatureList, is_asymmetric, sign_v1a


@dataclass(frozen=True)
class Attempt:
    """What one delivery attempt signs: the event, the exact body bytes, the attempt time."""

    event_id: str
    event_type: str  # the provider's event-type header value (delivery.event_type, or from the body)
    body: bytes
    timestamp: int  # the attempt's Unix seconds (not the event's time)
    request_uuid: str  # per-request id for senders that have one (GitLab's webhook UUID)
    triggered_at: str = ""  # when the event was created (ISO-8601; Shopify's X-Shopify-Triggered-At)


def hmac_sha256(key: bytes, content: bytes) -> bytes:
    return hmac.new(key, content, hashlib.sha256).digest()


class Signer:
    """Produces the headers of one attempt; one per provider."""

    scheme: ClassVar[str]
    # Headers derived from the event, the attempt or the secret: a spec's ``headers:`` may not
    # set them (the event type has its own field, delivery.event_type). The others a provider
    # sends (User-Agent, instance or shop names) a spec may override.
    derived: ClassVar[frozenset[str]] = frozenset()
    # How several signatures share one header during a key rotation (None: one signature per delivery).
    rotation: ClassVar[SignatureList | None] = None

    def headers(self, attempt: Attempt, secret: str) -> dict[str, str]:
        raise NotImplementedError

    def check_secret(self, secret: str) -> None:
        """Raise SpecError when `secret` cannot be used by this scheme."""
        if not secret:
            raise SpecError(f"signing.secret is empty; scheme {self.scheme!r} needs a secret")

    def signs_timestamp(self, secret: str) -> bool:
        """Whether a signature covers the attempt's timestamp (replay: the stale variant applies)."""
        return False

    def signs_body(self, secret: str) -> bool:
        """Whether a signature covers the body (replay: the tampered variant applies)."""
        return True

    def rotation_refusal(self, secret: str) -> str | None:
        """None when the provider sends one signature per active secret during a key rotation (its
        `rotation` says how they are written), else why a rotation has no overlap to test."""
        if self.rotation is None:
            return (
                f"the {self.scheme} scheme sends one signature per delivery: a secret change has no overlap in "
                "which two signatures arrive together"
            )
        return None

    def foreign_secret(self, entropy: bytes, like: str = "") -> str:
        """Another valid-looking secret of the same format (as `like`, the target's, where a scheme has
        several): a signature with it must be rejected."""
        return "whsec_" + entropy.hex()


@dataclass(frozen=True)
class ProviderProfile:
    """One sender's delivery behaviour: headers, signature, timeout and retries (the facts, and
    where each comes from: `sources`)."""

    scheme: str
    name: str
    event_id_header: str | None  # None: the event id lives in the body (`Provider.body_event_id`)
    signature_header: str | None
    signs_timestamp: bool
    tolerance_s: int | None
    timeout_s: float
    timeout_stand_in: bool
    schedule_s: tuple[float, ...]  # cumulative seconds since the first attempt
    schedule_stand_in: bool
    note: str
    sources: tuple[str, ...]
    # What a retry carries, whether a redelivery keeps the delivery id, when the provider gives up
    # and what it does then (`harness.wire.retry_policy`).
    retry: RetryPolicy

    @property
    def short_name(self) -> str:
        """The provider's name without its qualifier ("Stripe", not "Stripe (webhook endpoints)")."""
        return self.name.split(" (")[0]

    def compressed_schedule(self, factor: float) -> tuple[float, ...]:
        """The schedule divided by `factor`: same order, same count, shorter gaps."""
        if factor <= 0:
            raise SpecError(f"time compression must be > 0; got {factor!r}")
        return tuple(offset / factor for offset in self.schedule_s)


@dataclass(frozen=True)
class Example:
    """One published example payload (``harness/init/payloads/<file>``) and how `acklab init`
    makes it a template: where the event id and the object id go (``{{event_id}}``,
    ``{{order_id}}``), which fields are times, the event-type header where the body does not say it."""

    provider: str
    event: str  # what --event names
    event_ids: tuple[str, ...]  # body paths that carry the event id ({{event_id}})
    source: str  # where it was copied from (repository, path and commit, or the page)
    licence: str
    object_id: str | None = None  # the body path of the object the event is about ({{order_id}})
    unix_times: tuple[str, ...] = ()
    iso_times: tuple[str, ...] = ()
    event_type: str | None = None  # delivery.event_type, where the body's `type` does not say it
    added: Mapping[str, Any] = field(default_factory=dict)  # fields the lab adds (documented)
    # The user's own event (``acklab init --example``) instead of the shipped file, and where it came from.
    body: Mapping[str, Any] | None = None
    captured: str | None = None
    object_ids: tuple[str, ...] = ()  # more body paths naming the object ({{order_id}}, prefix kept)
    retyped: str | None = None  # --event TYPE: the type set in the body's `type`, when it has one
    published: str | None = None  # the shipped example an unshipped --event TYPE starts from

    @property
    def file(self) -> str:
        return f"{self.provider}.{(self.published or self.event).replace('/', '.')}.json"


def body_type(document: Mapping[str, Any]) -> str:
    """The body's top-level ``type`` (``webhook`` when it names none): most providers' event type."""
    value = document.get("type")
    return value if isinstance(value, str) else "webhook"


@dataclass(frozen=True)
class Provider:
    """Everything the lab knows of one provider, under its scheme's name (``signing.scheme``)."""

    name: str
    order: int  # where it is listed (the schema's signing.scheme enum has the same order)
    profile: ProviderProfile
    signer: Signer
    # The header naming the event's type (its value: delivery.event_type, else `event_type`).
    event_type_header: str | None = None
    # Headers whose values are (or are derived from) a secret: never written to evidence.
    redacted_headers: frozenset[str] = frozenset()
    # The body field that must carry {{event_id}} where the provider keeps the id in the body.
    body_event_id: str | None = None
    # Where its bodies keep the amount a conflicting body changes (its own examples' shape).
    amount_fields: tuple[str, ...] = ()
    examples: tuple[Example, ...] = ()
    # The event-type header's value for one body (Shopify's topics, GitLab's "... Hook").
    event_type: Callable[[Mapping[str, Any]], str] = body_type
    # The version of its API the lab serves a consumer (effects.provider_api.provider names the
    # provider: `harness.sinks.provider_api`); None: the lab serves no API of this provider.
    api_version: str | None = None

    def type_header(self, explicit: str | None, document: Mapping[str, Any]) -> str:
        """``delivery.event_type`` when the spec sets it (sent as is), else the provider's naming
        of the body's event."""
        return explicit if explicit else self.event_type(document)


def standard_headers(attempt: Attempt, secret: str) -> dict[str, str]:
    """Standard Webhooks: HMAC-SHA256 over ``id.timestamp.body`` with the decoded key, ``v1,`` base64;
    with a ``whsk_`` secret Ed25519, ``v1a,`` (verified with the ``whpk_`` public key:
    `harness.wire.signatures`)."""
    signed = f"{attempt.event_id}.{attempt.timestamp}.".encode() + attempt.body
    if is_asymmetric(secret):
        signature = sign_v1a(secret, signed)
    else:
        signature = "v1," + base64.b64encode(hmac_sha256(whsec_key(secret), signed)).decode()
    return {
        "webhook-id": attempt.event_id,
        "webhook-timestamp": str(attempt.timestamp),
        "webhook-signature": signature,
    }


def whsec_key(secret: str) -> bytes:
    """The HMAC key of a Standard Webhooks secret: the base64-decoded part after ``whsec_``."""
    try:
        return base64.b64decode(secret.removeprefix("whsec_"), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise SpecError(
            "a standard/gitlab signing secret must be 'whsec_' + base64 (Standard Webhooks); "
            f"got a value of {len(secret)} characters that is not base64 after the prefix"
        ) from exc
