"""Paddle Billing (notification destinations): ``Paddle-Signature: ts=<unix>;h1=<hex HMAC-SHA256 of
'{ts}:{body}'>`` keyed with the destination's secret key (several ``h1`` while a secret is rotated);
the event id is the body's ``event_id``, beside the notification's ``notification_id``.

Paddle wants a 2xx within 5 seconds and retries a failed notification (live accounts) up to 60
times over 3 days with exponential backoff; the intervals are unpublished: the stand-in spreads
the 60 retries geometrically from 1 minute to 3 days. Its SDKs allow a signed timestamp 5 seconds
of age by default.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import ClassVar

from acklab.harness.wire.providers.base import Attempt, Example, Provider, ProviderProfile, Signer
from acklab.harness.wire.retry_policy import RetryPolicy

RETRIES = 60
GIVES_UP_S = 259200
# A stand-in: 60 retries, the k-th at 60 s * r**(k-1), the last at 3 days.
RATIO = (GIVES_UP_S / 60) ** (1 / (RETRIES - 1))
SCHEDULE = (0.0, *(round(60 * RATIO**k) for k in range(RETRIES)))


class PaddleSigner(Signer):
    """``ts=<attempt seconds>;h1=<hex>``: HMAC-SHA256 of ``{ts}:{body}`` with the secret key."""

    scheme: ClassVar[str] = "paddle"
    derived: ClassVar[frozenset[str]] = frozenset({"paddle-signature"})

    def headers(self, attempt: Attempt, secret: str) -> dict[str, str]:
        signed = f"{attempt.timestamp}:".encode() + attempt.body
        digest = hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()
        return {"Paddle-Signature": f"ts={attempt.timestamp};h1={digest}"}

    def signs_timestamp(self, secret: str) -> bool:
        return True

    def foreign_secret(self, entropy: bytes, like: str = "") -> str:
        return "pdl_ntfset_" + entropy.hex()[:32]  # a destination secret key's shape


PROVIDER = Provider(
    name="paddle",
    order=80,
    profile=ProviderProfile(
        scheme="paddle",
        name="Paddle Billing (webhook notification destinations)",
        event_id_header=None,  # the event id lives in the body (body:event_id)
        signature_header="Paddle-Signature",
        signs_timestamp=True,
        tolerance_s=5,
        timeout_s=5.0,
        timeout_stand_in=False,
        schedule_s=SCHEDULE,
        schedule_stand_in=True,
        note=(
            "a 2xx within 5 s; live accounts: up to 60 retries over 3 days, exponential backoff, intervals "
            "unpublished: a geometric stand-in from 1 minute to 3 days"
        ),
        sources=(
            "https://developer.paddle.com/webhooks/about/signature-verification",
            "https://developer.paddle.com/webhooks/about/respond-to-webhooks",
            "https://github.com/PaddleHQ/paddle-python-sdk/blob/main/paddle_billing/Notifications/Verifier.py",
        ),
        retry=RetryPolicy(
            automatic=True,
            window_s=GIVES_UP_S,
            keeps_delivery_id=True,  # notification_id (and the event_id) stay the same across retries
            gives_up_after_s=GIVES_UP_S,
            gives_up="marks the notification failed after 60 attempts over 3 days (it can be replayed through the API)",
            note="live: 60 retries over 3 days (sandbox: 3 within 15 minutes)",
            sources=("https://developer.paddle.com/webhooks/respond-to-webhooks",),
        ),
    ),
    signer=PaddleSigner(),
    redacted_headers=frozenset({"paddle-signature"}),
    body_event_id="event_id",
    amount_fields=("data.details.totals.grand_total", "data.details.totals.total"),
    examples=(
        Example(
            "paddle",
            "transaction.created",
            event_ids=("event_id", "notification_id"),
            object_id="data.id",
            iso_times=("occurred_at", "data.created_at", "data.updated_at"),
            source=(
                "PaddleHQ/paddle-python-sdk (Paddle's Python SDK), tests/Functional/Resources/Notifications/"
                "_fixtures/response/list_default.json at 10dc8077d1e5: the payload of notification "
                "ntf_01h8brhd934tvsvf8s5q7thd2r (transaction.created), the body Paddle posts"
            ),
            licence="MIT, Copyright (c) 2024 Corey",
        ),
    ),
)
