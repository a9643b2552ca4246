"""GitLab: the legacy ``X-Gitlab-Token`` (the secret itself: no body, no time) or a signing token's
Standard Webhooks signature; ``Idempotency-Key`` names the event. A sender here sends the token."""

from __future__ import annotations

from acklab.app.schemes import Scheme
from acklab.app.signing import verify_gitlab


def sign(secret: str, event_id: str, body: bytes, timestamp: int) -> dict[str, str]:
    return {"X-Gitlab-Token": secret, "Idempotency-Key": event_id, "X-Gitlab-Event": "Order Hook"}


SCHEME = Scheme(
    "gitlab",
    verify_gitlab,
    sign,
    ("Idempotency-Key",),
    "X-Gitlab-Token",
    ("Idempotency-Key",),
    timestamped=False,
    signs_body=False,
)
