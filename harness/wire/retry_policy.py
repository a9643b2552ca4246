"""Each provider's retry policy as data: when it retries, what a retry says, when it gives up.

A dedupe is only as good as its memory is long: the provider's retry window is the number
that matters, and what happens at its end (an endpoint disabled, a subscription deleted) is
what a consumer that never acknowledges would pay. One `RetryPolicy` per provider, beside
its schedule in the provider's profile (`harness.wire.providers`):

* `retry_headers`: what an attempt after the first carries to say it is a retry (Slack's
  ``X-Slack-Retry-Num`` and ``X-Slack-Retry-Reason``); ``{retry}`` is the retry's number
  (1 for the second attempt), ``{reason}`` why the previous attempt failed, in the
  provider's words (`REASONS`);
* `keeps_delivery_id`: whether a redelivery carries the delivery id of the first attempt
  (GitHub's redeliveries keep ``X-GitHub-Delivery``; a provider that does not sends a fresh one);
* `window_s`: when the last retry of an event arrives — the end of the automatic schedule, or
  for a provider that never retries by itself, the manual redelivery people script (GitHub: a
  day later): where ``late-redelivery`` shifts the consumer's clock;
* `gives_up_after_s` and `gives_up`: when it stops, and what it does then.

Facts come from the provider fact sheet (``webhook-providers.json``, each with its source) and,
for Slack and Paddle, from their documentation (`RetryPolicy.sources`); a value the provider
does not publish is marked a stand-in where it is used.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

DAY = 86_400.0
HOUR = 3_600.0
# What a retry says about the attempt before it, per the provider's own vocabulary.
REASONS: Mapping[str, str] = {
    "timeout": "http_timeout",
    "error": "http_error",
    "connect": "connection_failed",
}


@dataclass(frozen=True)
class RetryPolicy:
    """How one provider retries an event it could not deliver."""

    automatic: bool  # False: it never retries by itself (a person or a script redelivers)
    window_s: float  # when the last (re)delivery of an event arrives, since its first attempt
    keeps_delivery_id: bool
    gives_up_after_s: float | None  # None: never documented
    gives_up: str  # what it does then, in words completing "<provider> ..."
    retry_headers: tuple[tuple[str, str], ...] = ()
    note: str = ""
    sources: tuple[str, ...] = ()

    def headers(self, attempt: int, reason: str = "timeout") -> dict[str, str]:
        """The retry headers of attempt `attempt` (1: the first, which carries none)."""
        if attempt <= 1:
            return {}
        words = {"retry": str(attempt - 1), "reason": REASONS.get(reason, reason)}
        return {name: template.format(**words) for name, template in self.retry_headers}

    def consequence(self, provider: str) -> str:
        """What a consumer that never acknowledges an event pays, in one sentence."""
        if self.gives_up_after_s is None:
            return f"{provider} {self.gives_up}"
        return f"{provider} {self.gives_up} after {span(self.gives_up_after_s)} of failed deliveries"


def span(seconds: float) -> str:
    """A duration as a person says it: 3 days, 4 hours, 5 minutes, 30 seconds."""
    for unit, size in (("day", DAY), ("hour", HOUR), ("minute", 60.0)):
        if seconds >= size and seconds % size == 0:
            count = int(seconds // size)
            return f"{count} {unit}{'s' if count != 1 else ''}"
    if seconds >= HOUR:
        return f"{seconds / HOUR:.1f} hours"
    return f"{seconds:g} seconds"


POLICIES: Mapping[str, RetryPolicy] = {
    "standard": RetryPolicy(
        automatic=True,
        window_s=272_105,
        keeps_delivery_id=True,  # webhook-id is the same on every retry
        gives_up_after_s=272_105,
        gives_up="marks the message failed and recommends disabling the endpoint",
        note="the spec's example schedule, last attempt at 75:35:05",
        sources=(
            "https://github.com/standard-webhooks/standard-webhooks/blob/main/spec/standard-webhooks.md",
        ),
    ),
    "stripe": RetryPolicy(
        automatic=True,
        window_s=3 * DAY,
        keeps_delivery_id=True,  # the Event id in the body; no delivery-id header
        gives_up_after_s=3 * DAY,
        gives_up="stops retrying the event and may disable the endpoint (it emails before it does)",
        note="live mode: exponential backoff 'up to three days'; a manual resend from the Dashboard up to 15 days",
        sources=("https://docs.stripe.com/webhooks#retries",),
    ),
    "github": RetryPolicy(
        automatic=False,
        window_s=DAY,  # stand-in: the scripted next-day redelivery (GitHub keeps deliveries 3 days)
        keeps_delivery_id=True,  # a redelivery keeps X-GitHub-Delivery
        gives_up_after_s=None,
        gives_up="never retries by itself: a failed delivery stays failed until someone redelivers it (3 days at most)",
        note="no automatic retries; manual or scripted redelivery of the past 3 days keeps X-GitHub-Delivery",
        sources=("https://docs.github.com/en/webhooks/using-webhooks/handling-failed-webhook-deliveries",),
    ),
    "gitlab": RetryPolicy(
        automatic=False,
        window_s=DAY,  # stand-in: a 'Resend Request' a day later
        keeps_delivery_id=True,  # Idempotency-Key is reused by a resend
        gives_up_after_s=None,
        gives_up=(
            "disables the hook for a while after 4 consecutive failures (1 minute, doubling up to 24 hours) and "
            "for good after 40"
        ),
        note="no automatic schedule; duplicates after timeouts; 'Resend Request' reuses Idempotency-Key",
        sources=("https://docs.gitlab.com/user/project/integrations/webhooks/",),
    ),
    "shopify": RetryPolicy(
        automatic=True,
        window_s=4 * HOUR,
        keeps_delivery_id=True,  # X-Shopify-Webhook-Id names the delivery across its retries
        gives_up_after_s=4 * HOUR,
        gives_up="deletes the subscription (one created with the Admin API) after 8 consecutive failures",
        note="'8 times over 4 hours' since 2024-09-10 (earlier: 19 times over 48 hours)",
        sources=("https://shopify.dev/docs/apps/build/webhooks/subscribe/https",),
    ),
    "slack": RetryPolicy(
        automatic=True,
        window_s=6 * 60 + 1,  # nearly at once, after 1 minute, after 5 minutes
        keeps_delivery_id=True,  # the event_id in the body
        gives_up_after_s=6 * 60 + 1,
        gives_up=(
            "stops after 3 retries, and disables the app's event subscriptions when under 5% of deliveries "
            "succeed over 60 minutes"
        ),
        retry_headers=(("X-Slack-Retry-Num", "{retry}"), ("X-Slack-Retry-Reason", "{reason}")),
        note="Events API: 3 retries with exponential backoff; an answer is due within 3 seconds",
        sources=("https://api.slack.com/apis/events-api#retries",),
    ),
    "paddle": RetryPolicy(
        automatic=True,
        window_s=3 * DAY,
        keeps_delivery_id=True,  # notification_id stays the same across retries
        gives_up_after_s=3 * DAY,
        gives_up="marks the notification failed after 60 attempts over 3 days",
        note="live: 60 retries over 3 days (sandbox: 3 within 15 minutes)",
        sources=("https://developer.paddle.com/webhooks/respond-to-webhooks",),
    ),
    "none": RetryPolicy(
        automatic=True,
        window_s=272_105,
        keeps_delivery_id=True,
        gives_up_after_s=272_105,
        gives_up="gives up (Standard Webhooks' example schedule, no provider)",
    ),
}


def policy(scheme: str) -> RetryPolicy:
    """The retry policy of `scheme` (an unknown scheme: the unsigned sender's)."""
    return POLICIES.get(scheme, POLICIES["none"])
