"""Slack (Events API request URLs): ``X-Slack-Signature: v0=<hex HMAC-SHA256 of 'v0:{timestamp}:{body}'>``
keyed with the app's signing secret, ``X-Slack-Request-Timestamp`` the attempt's Unix seconds,
5 minutes either way; the event id is the body's ``event_id``.

Slack wants a 2xx within 3 seconds; a failed delivery (a timeout, a connection that failed, a
non-2xx answer) is retried 3 times — nearly at once, after 1 minute, after 5 minutes — each
retry numbered in ``X-Slack-Retry-Num`` (1, 2, 3) with its reason in ``X-Slack-Retry-Reason``
(``http_timeout``, ``connection_failed``, ``http_error``...): the retry policy's headers, added
by the lab to every attempt after the first. The body, and its ``event_id``, are the same on
every retry.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import ClassVar

from acklab.harness.wire.providers.base import Attempt, Example, Provider, ProviderProfile, Signer
from acklab.harness.wire.retry_policy import RetryPolicy


class SlackSigner(Signer):
    """``v0=`` + hex HMAC-SHA256 over ``v0:{timestamp}:{body}``, the timestamp beside it."""

    scheme: ClassVar[str] = "slack"
    derived: ClassVar[frozenset[str]] = frozenset(
        {"x-slack-signature", "x-slack-request-timestamp", "x-slack-retry-num", "x-slack-retry-reason"}
    )

    def headers(self, attempt: Attempt, secret: str) -> dict[str, str]:
        signed = f"v0:{attempt.timestamp}:".encode() + attempt.body
        digest = hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()
        return {
            "User-Agent": "Slackbot 1.0 (+https://api.slack.com/robots)",
            "X-Slack-Request-Timestamp": str(attempt.timestamp),
            "X-Slack-Signature": f"v0={digest}",
        }

    def signs_timestamp(self, secret: str) -> bool:
        return True

    def foreign_secret(self, entropy: bytes, like: str = "") -> str:
        return entropy.hex()[:32]  # a signing secret's shape: 32 hex digits


PROVIDER = Provider(
    name="slack",
    order=55,
    profile=ProviderProfile(
        scheme="slack",
        name="Slack (Events API request URLs)",
        event_id_header=None,  # event_id in the body; retries say so in X-Slack-Retry-Num
        signature_header="X-Slack-Signature",
        signs_timestamp=True,
        tolerance_s=300,
        timeout_s=3.0,
        timeout_stand_in=False,
        schedule_s=(0, 1, 61, 361),
        schedule_stand_in=True,
        note="3 retries: nearly at once, after 1 minute, after 5 minutes; an answer is due within 3 seconds",
        sources=(
            "https://api.slack.com/apis/events-api#retries",
            "https://api.slack.com/authentication/verifying-requests-from-slack",
            "https://docs.slack.dev/authentication/verifying-requests-from-slack/",
            "https://docs.slack.dev/apis/events-api/",
            "https://github.com/slackapi/python-slack-sdk/blob/main/slack_sdk/signature/__init__.py",
        ),
        retry=RetryPolicy(
            automatic=True,
            window_s=6 * 60 + 1,  # nearly at once, after 1 minute, after 5 minutes
            keeps_delivery_id=True,  # the event_id in the body
            gives_up_after_s=6 * 60 + 1,
            gives_up=(
                "stops after 3 retries, and disables the app's event subscriptions when under 5% of "
                "deliveries succeed over 60 minutes"
            ),
            retry_headers=(("X-Slack-Retry-Num", "{retry}"), ("X-Slack-Retry-Reason", "{reason}")),
            note="Events API: 3 retries with exponential backoff; an answer is due within 3 seconds",
            sources=("https://api.slack.com/apis/events-api#retries",),
        ),
    ),
    signer=SlackSigner(),
    redacted_headers=frozenset({"x-slack-signature"}),
    body_event_id="event_id",
    examples=(
        Example(
            "slack",
            "app_mention",
            event_ids=("event_id",),
            object_id="event.client_msg_id",
            unix_times=("event_time",),
            source=(
                "slackapi/bolt-python (Slack's Python framework), tests/scenario_tests/test_events.py at "
                "0626b7990637: TestEvents.valid_event_body, an app_mention event_callback"
            ),
            licence="MIT, Copyright (c) 2020- Slack Technologies, Inc",
        ),
    ),
)
