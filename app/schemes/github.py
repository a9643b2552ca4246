"""GitHub: ``X-Hub-Signature-256``; ``X-GitHub-Delivery`` names the event; no timestamp is signed."""

from __future__ import annotations

from acklab.app.schemes import Scheme
from acklab.app.signing import github_signature, verify_github


def sign(secret: str, event_id: str, body: bytes, timestamp: int) -> dict[str, str]:
    return {
        "X-Hub-Signature-256": github_signature(secret, body),
        "X-GitHub-Delivery": event_id,
        "X-GitHub-Event": "order",
    }


SCHEME = Scheme(
    "github",
    verify_github,
    sign,
    ("X-GitHub-Delivery",),
    "X-Hub-Signature-256",
    ("X-GitHub-Delivery",),
    timestamped=False,
)
