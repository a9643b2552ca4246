"""Standard Webhooks (spec v1.0.0): ``webhook-id``, ``webhook-timestamp``, ``webhook-signature``.

The spec publishes an *example* schedule (0 s, 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 14 h, 20 h,
24 h); it is used as is. Its timeout is only a recommended range (15-30 s): the stand-in is 15 s.
"""

from __future__ import annotations

import base64
import hashlib
from typing import ClassVar

from acklab.harness.wire.providers.base import (
    Attempt,
    Example,
    Provider,
    ProviderProfile,
    Signer,
    standard_headers,
    whsec_key,
)
from acklab.harness.wire.retry_policy import RetryPolicy
from acklab.harness.wire.signatures import SPACED_LIST, SignatureList, check_asymmetric, is_asymmetric

SCHEDULE = (0, 5, 305, 2105, 9305, 27305, 63305, 113705, 185705, 272105)
HEADERS = frozenset({"webhook-id", "webhook-timestamp", "webhook-signature"})
SOURCES = (
    "https://github.com/standard-webhooks/standard-webhooks/blob/main/spec/standard-webhooks.md",
    "https://github.com/standard-webhooks/standard-webhooks/blob/main/libraries/python/standardwebhooks/webhooks.py",
)


class StandardSigner(Signer):
    """HMAC-SHA256 over ``id.timestamp.body``, base64, ``v1,`` prefix; the key is the ``whsec_`` secret
    decoded. With a ``whsk_`` secret: Ed25519, ``v1a,`` prefix (`harness.wire.signatures`)."""

    scheme: ClassVar[str] = "standard"
    derived: ClassVar[frozenset[str]] = HEADERS
    rotation: ClassVar[SignatureList | None] = SPACED_LIST

    def headers(self, attempt: Attempt, secret: str) -> dict[str, str]:
        return standard_headers(attempt, secret)

    def check_secret(self, secret: str) -> None:
        super().check_secret(secret)
        if is_asymmetric(secret):
            check_asymmetric(secret)
        else:
            whsec_key(secret)

    def signs_timestamp(self, secret: str) -> bool:
        return True

    def foreign_secret(self, entropy: bytes, like: str = "") -> str:
        if is_asymmetric(like):  # an Ed25519 key of its own
            return "whsk_" + base64.b64encode(hashlib.sha256(entropy).digest()).decode()
        return "whsec_" + base64.b64encode(entropy[:24]).decode()


PROVIDER = Provider(
    name="standard",
    order=10,
    profile=ProviderProfile(
        scheme="standard",
        name="Standard Webhooks (spec v1.0.0)",
        event_id_header="webhook-id",
        signature_header="webhook-signature",
        signs_timestamp=True,
        tolerance_s=300,
        timeout_s=15.0,
        timeout_stand_in=True,
        schedule_s=SCHEDULE,
        schedule_stand_in=False,
        note="example schedule of the spec; timeout: lower end of the recommended 15-30 s",
        sources=SOURCES,
        retry=RetryPolicy(
            automatic=True,
            window_s=272_105,
            keeps_delivery_id=True,  # webhook-id is the same on every retry
            gives_up_after_s=272_105,
            gives_up="marks the message failed and recommends disabling the endpoint",
            note="the spec's example schedule, last attempt at 75:35:05",
            sources=SOURCES[:1],
        ),
    ),
    signer=StandardSigner(),
    redacted_headers=frozenset({"webhook-signature", "svix-signature"}),
    amount_fields=("data.amount", "data.amount_cents"),
    # The spec's "full payload" example has no event id in its body (it travels in webhook-id):
    # the template adds a top-level id, since a template must name {{event_id}}.
    examples=(
        Example(
            "standard",
            "contact.created",
            event_ids=("id",),
            object_id="data.id",
            iso_times=("timestamp",),
            added={"id": ""},
            source="standard-webhooks/standard-webhooks, spec/standard-webhooks.md ('full payload' example) at b2fa7b8719fb",
            licence="Apache-2.0",
        ),
    ),
)
