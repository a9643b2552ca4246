"""Provider profiles: how each real sender signs, times out and retries.

The facts are copied from the project's provider fact sheet (``webhook-providers.json``,
compiled from each provider's documentation, source code and reference libraries; the
URL of every fact is in ``ProviderProfile.sources``). They are embedded here on purpose:
the lab must not depend on a file outside the package at run time.

Where a provider publishes no value the profile says so (``*_stand_in``) and uses a
documented stand-in instead, so a verdict never rests on a number presented as fact:

* Standard Webhooks publishes an *example* schedule (0 s, 5 s, 5 min, 30 min, 2 h, 5 h,
  10 h, 14 h, 20 h, 24 h); it is used as is. Its timeout is only a recommended range
  (15-30 s): the stand-in is 15 s.
* Stripe publishes neither intervals ("exponential backoff ... up to three days") nor a
  timeout: the stand-in schedule doubles from 1 min and ends at 3 days; timeout 10 s.
* GitHub does not retry at all; a failed delivery is redelivered by hand (UI/REST API)
  with the same ``X-GitHub-Delivery``: the stand-in is one redelivery after 1 min.
* GitLab documents no retry schedule, only duplicates after timeouts and a manual
  "Resend Request" that reuses ``Idempotency-Key``: the stand-in is one resend after 1 min.
* Shopify: "8 retries over 4 hours, exponential backoff", intervals unpublished: the
  stand-in doubles from 1 min and ends at 4 h (9 attempts in all).
* ``none`` (an unsigned sender) uses the Standard Webhooks example schedule.

Schedules run time-compressed: cumulative offsets are divided by a factor, so order and
count are preserved; the factor is recorded in every incident.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from acklab.harness.errors import SpecError
from acklab.harness.wire.retry_policy import RetryPolicy, policy

SCHEMES = ("standard", "stripe", "github", "gitlab", "shopify", "slack", "none")
DEFAULT_TIME_COMPRESSION = 10_000.0

_STANDARD_SCHEDULE = (0, 5, 305, 2105, 9305, 27305, 63305, 113705, 185705, 272105)


@dataclass(frozen=True)
class ProviderProfile:
    """One sender's delivery behaviour: headers, signature, timeout and retry schedule."""

    scheme: str
    name: str
    event_id_header: str | None
    signature_header: str | None
    signs_timestamp: bool
    tolerance_s: int | None
    timeout_s: float
    timeout_stand_in: bool
    schedule_s: tuple[float, ...]  # cumulative seconds since the first attempt
    schedule_stand_in: bool
    note: str
    sources: tuple[str, ...]

    @property
    def short_name(self) -> str:
        """The provider's name without its qualifier ("Stripe", not "Stripe (webhook endpoints)")."""
        return self.name.split(" (")[0]

    @property
    def retry(self) -> RetryPolicy:
        """What a retry carries, when the provider gives up and what it does then (`harness.wire.retry_policy`)."""
        return policy(self.scheme)

    def compressed_schedule(self, factor: float) -> tuple[float, ...]:
        """The schedule divided by `factor`: same order, same count, shorter gaps."""
        if factor <= 0:
            raise SpecError(f"time compression must be > 0; got {factor!r}")
        return tuple(offset / factor for offset in self.schedule_s)


PROFILES: dict[str, ProviderProfile] = {
    "standard": ProviderProfile(
        scheme="standard",
        name="Standard Webhooks (spec v1.0.0)",
        event_id_header="webhook-id",
        signature_header="webhook-signature",
        signs_timestamp=True,
        tolerance_s=300,
        timeout_s=15.0,
        timeout_stand_in=True,
        schedule_s=_STANDARD_SCHEDULE,
        schedule_stand_in=False,
        note="example schedule of the spec; timeout: lower end of the recommended 15-30 s",
        sources=(
            "https://github.com/standard-webhooks/standard-webhooks/blob/main/spec/standard-webhooks.md",
            "https://github.com/standard-webhooks/standard-webhooks/blob/main/libraries/python/standardwebhooks/webhooks.py",
        ),
    ),
    "stripe": ProviderProfile(
        scheme="stripe",
        name="Stripe (webhook endpoints)",
        event_id_header=None,  # the Event id lives in the body (body:id)
        signature_header="Stripe-Signature",
        signs_timestamp=True,
        tolerance_s=300,
        timeout_s=10.0,
        timeout_stand_in=True,
        schedule_s=(0, 60, 180, 420, 900, 1860, 3780, 7620, 15300, 30660, 61380, 122820, 259200),
        schedule_stand_in=True,
        note="intervals and timeout unpublished ('exponential backoff, up to three days'): stand-ins",
        sources=(
            "https://docs.stripe.com/webhooks",
            "https://github.com/stripe/stripe-python/blob/master/stripe/_webhook.py",
        ),
    ),
    "github": ProviderProfile(
        scheme="github",
        name="GitHub (repository/organization/App webhooks)",
        event_id_header="X-GitHub-Delivery",
        signature_header="X-Hub-Signature-256",
        signs_timestamp=False,
        tolerance_s=None,
        timeout_s=10.0,
        timeout_stand_in=False,
        schedule_s=(0, 60),
        schedule_stand_in=True,
        note=(
            "GitHub does not retry automatically; stand-in: one manual redelivery (same X-GitHub-Delivery). "
            "Both X-Hub-Signature-256 and the legacy sha1 X-Hub-Signature are sent"
        ),
        sources=(
            "https://docs.github.com/en/webhooks/webhook-events-and-payloads#delivery-headers",
            "https://docs.github.com/en/webhooks/using-webhooks/validating-webhook-deliveries",
        ),
    ),
    "gitlab": ProviderProfile(
        scheme="gitlab",
        name="GitLab (project/group webhooks)",
        event_id_header="Idempotency-Key",
        signature_header="webhook-signature",
        signs_timestamp=True,  # with a signing token (whsec_...); the legacy X-Gitlab-Token signs nothing
        tolerance_s=None,
        timeout_s=10.0,
        timeout_stand_in=False,
        schedule_s=(0, 60),
        schedule_stand_in=True,
        note="no automatic schedule documented; stand-in: one 'Resend Request' reusing Idempotency-Key",
        sources=(
            "https://docs.gitlab.com/user/project/integrations/webhooks/",
            "https://github.com/gitlabhq/gitlabhq/blob/master/app/services/web_hook_service.rb",
        ),
    ),
    "shopify": ProviderProfile(
        scheme="shopify",
        name="Shopify (HTTPS webhook subscriptions)",
        event_id_header="X-Shopify-Webhook-Id",
        signature_header="X-Shopify-Hmac-Sha256",
        signs_timestamp=False,
        tolerance_s=None,
        timeout_s=5.0,
        timeout_stand_in=False,
        schedule_s=(0, 60, 180, 420, 900, 1860, 3780, 7620, 14400),
        schedule_stand_in=True,
        note="'8 retries over 4 hours, exponential backoff', intervals unpublished: stand-in doubling from 1 min",
        sources=(
            "https://shopify.dev/docs/apps/build/webhooks/subscribe/https",
            "https://shopify.dev/docs/apps/build/webhooks/verify-deliveries",
        ),
    ),
    "slack": ProviderProfile(
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
        ),
    ),
    "none": ProviderProfile(
        scheme="none",
        name="unsigned sender",
        event_id_header=None,
        signature_header=None,
        signs_timestamp=False,
        tolerance_s=None,
        timeout_s=15.0,
        timeout_stand_in=True,
        schedule_s=_STANDARD_SCHEDULE,
        schedule_stand_in=True,
        note="no provider: Standard Webhooks' example schedule and a 15 s timeout",
        sources=(),
    ),
}


def profile(scheme: str) -> ProviderProfile:
    """The profile of `scheme`; a clear error naming the known schemes otherwise."""
    try:
        return PROFILES[scheme]
    except KeyError:
        raise SpecError(f"unknown signing scheme {scheme!r}; expected one of {', '.join(SCHEMES)}") from None


# GitLab names its event header after the body's object_kind: "push" -> "Push Hook",
# "merge_request" -> "Merge Request Hook"; a job's object_kind is "build" (docs: "Job Hook").
_GITLAB_KIND_NAMES = {"build": "Job"}


def event_type_header(scheme: str, explicit: str | None, document: Mapping[str, Any]) -> str:
    """The value of the provider's event-type header for one event.

    ``delivery.event_type`` when the spec sets it, sent as is. Otherwise the body's top-level
    ``type``; a GitLab body without one names its event in ``object_kind`` (GitLab's
    "Push Hook" naming), and Shopify topics use ``/`` where event types use ``.``
    (``orders.create`` -> ``orders/create``). A body that names no type gives ``webhook``.
    """
    if explicit:
        return explicit
    body_type = document.get("type")
    kind = document.get("object_kind")
    if scheme == "gitlab":
        name = body_type if isinstance(body_type, str) else kind if isinstance(kind, str) else None
        if name is None:
            return "webhook Hook"
        if name.endswith(" Hook"):
            return name
        words = _GITLAB_KIND_NAMES.get(name, name.replace("_", " ").replace(".", " ").title())
        return f"{words} Hook"
    if not isinstance(body_type, str):
        return "webhook"
    return body_type.replace(".", "/") if scheme == "shopify" else body_type
