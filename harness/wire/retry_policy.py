"""Each provider's retry policy as data: when it retries, what a retry says, when it gives up.

A dedupe is only as good as its memory is long: the provider's retry window is the number
that matters, and what happens at its end (an endpoint disabled, a subscription deleted) is
what a consumer that never acknowledges would pay. One `RetryPolicy` per provider, in its
profile beside its schedule (``ProviderProfile.retry``, `harness.wire.providers`):

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

Facts come from each provider's documentation (`RetryPolicy.sources`); a value the provider
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
