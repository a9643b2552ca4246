"""GitLab (project and group webhooks): Standard Webhooks signing with a ``whsec_`` signing token,
else the legacy ``X-Gitlab-Token`` (the secret sent verbatim: it signs neither body nor time);
``Idempotency-Key`` names the event.

GitLab documents no retry schedule, only duplicates after timeouts and a manual "Resend Request"
that reuses ``Idempotency-Key``: the stand-in is one resend after 1 min.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any, ClassVar

from acklab.harness.wire.providers.base import (
    Attempt,
    Example,
    Provider,
    ProviderProfile,
    Signer,
    standard_headers,
)
from acklab.harness.wire.providers.standard import HEADERS as STANDARD_HEADERS
from acklab.harness.wire.retry_policy import DAY, RetryPolicy
from acklab.harness.wire.signatures import SPACED_LIST, SignatureList

# GitLab names its event header after the body's object_kind: "push" -> "Push Hook",
# "merge_request" -> "Merge Request Hook"; a job's object_kind is "build" (docs: "Job Hook").
KIND_NAMES = {"build": "Job"}


def hook_name(document: Mapping[str, Any]) -> str:
    """``X-Gitlab-Event`` for a body: its ``type``, else its ``object_kind``, in GitLab's "... Hook" naming."""
    body_type, kind = document.get("type"), document.get("object_kind")
    name = body_type if isinstance(body_type, str) else kind if isinstance(kind, str) else None
    if name is None:
        return "webhook Hook"
    if name.endswith(" Hook"):
        return name
    words = KIND_NAMES.get(name, name.replace("_", " ").replace(".", " ").title())
    return f"{words} Hook"


class GitLabSigner(Signer):
    """Standard Webhooks signing or the legacy token, and GitLab's delivery headers (event, event
    UUID, idempotency key, per-request UUID, instance)."""

    scheme: ClassVar[str] = "gitlab"
    derived: ClassVar[frozenset[str]] = STANDARD_HEADERS | frozenset(
        {
            "idempotency-key",
            "x-gitlab-event",
            "x-gitlab-event-uuid",
            "x-gitlab-webhook-uuid",
            "x-gitlab-token",
        }
    )
    rotation: ClassVar[SignatureList | None] = SPACED_LIST

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
            headers.update(standard_headers(attempt, secret))
        else:
            headers["X-Gitlab-Token"] = secret
        return headers

    def signs_timestamp(self, secret: str) -> bool:
        return secret.startswith("whsec_")  # the legacy token covers no time

    def signs_body(self, secret: str) -> bool:
        return secret.startswith("whsec_")

    def rotation_refusal(self, secret: str) -> str | None:
        if not secret.startswith("whsec_"):
            return (
                "GitLab's legacy X-Gitlab-Token is one shared token, not a signature: a delivery carries one value, "
                "so a rotation has no overlap to test (a whsec_ signing token signs as Standard Webhooks)"
            )
        return super().rotation_refusal(secret)

    def foreign_secret(self, entropy: bytes, like: str = "") -> str:
        return "whsec_" + base64.b64encode(entropy[:24]).decode()


PROVIDER = Provider(
    name="gitlab",
    order=40,
    profile=ProviderProfile(
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
        retry=RetryPolicy(
            automatic=False,
            window_s=DAY,  # stand-in: a 'Resend Request' a day later
            keeps_delivery_id=True,  # Idempotency-Key is reused by a resend
            gives_up_after_s=None,
            gives_up=(
                "disables the hook for a while after 4 consecutive failures (1 minute, doubling up to 24 hours) "
                "and for good after 40"
            ),
            note="no automatic schedule; duplicates after timeouts; 'Resend Request' reuses Idempotency-Key",
            sources=("https://docs.gitlab.com/user/project/integrations/webhooks/",),
        ),
    ),
    signer=GitLabSigner(),
    event_type_header="X-Gitlab-Event",
    redacted_headers=frozenset({"webhook-signature", "x-gitlab-token"}),
    event_type=hook_name,
    examples=(
        Example(
            "gitlab",
            "push",
            event_ids=("after", "checkout_sha", "commits.1.id"),
            source=(
                "GitLab's documentation, 'Webhook events', Push events payload example "
                "(doc/user/project/integrations/webhook_events.md in gitlab-org/gitlab)"
            ),
            licence="CC BY-SA 4.0 (GitLab's documentation licence); the file is shared under the same licence",
        ),
    ),
)
