"""``scheme: none``: an unsigned sender, with Standard Webhooks' example schedule and a 15 s timeout."""

from __future__ import annotations

from typing import ClassVar

from acklab.harness.wire.providers.base import Attempt, Provider, ProviderProfile, Signer
from acklab.harness.wire.providers.standard import SCHEDULE
from acklab.harness.wire.retry_policy import RetryPolicy


class Unsigned(Signer):
    """No signature at all."""

    scheme: ClassVar[str] = "none"

    def headers(self, attempt: Attempt, secret: str) -> dict[str, str]:
        return {}

    def check_secret(self, secret: str) -> None:
        return None

    def signs_body(self, secret: str) -> bool:
        return False


PROVIDER = Provider(
    name="none",
    order=60,
    profile=ProviderProfile(
        scheme="none",
        name="unsigned sender",
        event_id_header=None,
        signature_header=None,
        signs_timestamp=False,
        tolerance_s=None,
        timeout_s=15.0,
        timeout_stand_in=True,
        schedule_s=SCHEDULE,
        schedule_stand_in=True,
        note="no provider: Standard Webhooks' example schedule and a 15 s timeout",
        sources=(),
        retry=RetryPolicy(
            automatic=True,
            window_s=272_105,
            keeps_delivery_id=True,
            gives_up_after_s=272_105,
            gives_up="gives up (Standard Webhooks' example schedule, no provider)",
        ),
    ),
    signer=Unsigned(),
)
