"""GitHub (repository, organization and App webhooks): ``X-Hub-Signature-256`` (and the legacy sha1
``X-Hub-Signature``), hex HMACs of the body; ``X-GitHub-Delivery`` names the event.

GitHub does not retry at all; a failed delivery is redelivered by hand (UI or REST API) with the
same ``X-GitHub-Delivery``: the stand-in is one redelivery after 1 min.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import ClassVar

from acklab.harness.wire.providers.base import Attempt, Example, Provider, ProviderProfile, Signer
from acklab.harness.wire.retry_policy import DAY, RetryPolicy

# One hook's deliveries all carry the same hook id and installation target, as on GitHub.
HOOK_ID = "419283700"
TARGET_ID = "601284512"
SOURCE = "octokit/webhooks (GitHub's webhook payload examples, as served in GitHub's docs), payload-examples/api.github.com/{} at 3a58428aa5c3"
LICENCE = "MIT, Copyright (c) 2018 Gregor Martynus"


class GitHubSigner(Signer):
    """Both signatures and the delivery headers GitHub sends; the delivery GUID names the event
    (a redelivery keeps it)."""

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
            "X-GitHub-Hook-ID": HOOK_ID,
            "X-GitHub-Hook-Installation-Target-Type": "repository",
            "X-GitHub-Hook-Installation-Target-ID": TARGET_ID,
            "X-Hub-Signature": "sha1=" + hmac.new(key, attempt.body, hashlib.sha1).hexdigest(),
            "X-Hub-Signature-256": "sha256=" + hmac.new(key, attempt.body, hashlib.sha256).hexdigest(),
        }


PROVIDER = Provider(
    name="github",
    order=30,
    profile=ProviderProfile(
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
        retry=RetryPolicy(
            automatic=False,
            window_s=DAY,  # stand-in: the scripted next-day redelivery (GitHub keeps deliveries 3 days)
            keeps_delivery_id=True,  # a redelivery keeps X-GitHub-Delivery
            gives_up_after_s=None,
            gives_up="never retries by itself: a failed delivery stays failed until someone redelivers it (3 days at most)",
            note="no automatic retries; manual or scripted redelivery of the past 3 days keeps X-GitHub-Delivery",
            sources=(
                "https://docs.github.com/en/webhooks/using-webhooks/handling-failed-webhook-deliveries",
            ),
        ),
    ),
    signer=GitHubSigner(),
    event_type_header="X-GitHub-Event",
    redacted_headers=frozenset({"x-hub-signature", "x-hub-signature-256"}),
    examples=(
        # GitHub names the delivery in X-GitHub-Delivery; the body carries it where a push names
        # its head commit, so the template has its event id and each event its own commit.
        Example(
            "github",
            "push",
            event_ids=("after", "head_commit.id", "commits.0.id"),
            event_type="push",
            source=SOURCE.format("push/with-new-branch.payload.json"),
            licence=LICENCE,
        ),
        Example(
            "github",
            "pull_request.opened",
            event_ids=("pull_request.head.sha",),
            object_id="pull_request.node_id",
            event_type="pull_request",
            source=SOURCE.format("pull_request/opened.payload.json"),
            licence=LICENCE,
        ),
        Example(
            "github",
            "issues.opened",
            event_ids=("issue.node_id",),
            event_type="issues",
            source=SOURCE.format("issues/opened.payload.json"),
            licence=LICENCE,
        ),
    ),
)
