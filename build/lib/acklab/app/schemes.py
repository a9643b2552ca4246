"""The table of signature schemes: how each verifies, where its event id lives, how a sender signs.

``verify(scheme, ...)`` and ``sign(scheme, ...)`` dispatch to the pure functions of
``app.signing``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from acklab.app.signing import (
    github_signature,
    shopify_signature,
    standard_signature,
    stripe_signature_header,
    verify_github,
    verify_gitlab,
    verify_shopify,
    verify_standard,
    verify_stripe,
)


class Verifier(Protocol):
    """The shape shared by every ``verify_<scheme>`` function."""

    def __call__(
        self,
        secret: str,
        headers: Mapping[str, str],
        body: bytes,
        *,
        tolerance_s: int = ...,
        now: float | None = ...,
    ) -> None: ...


@dataclass(frozen=True)
class Scheme:
    """A provider's signature scheme and where its dedupe key (the event id) lives.

    ``dedupe_headers`` are tried in order; empty means the key is the body's ``id`` field.
    ``signature_header`` and ``other_headers`` are what the OpenAPI document declares.
    """

    name: str
    verify: Verifier
    dedupe_headers: tuple[str, ...]
    signature_header: str
    other_headers: tuple[str, ...] = ()


SCHEMES: dict[str, Scheme] = {
    "standard": Scheme(
        "standard",
        verify_standard,
        ("webhook-id", "svix-id"),
        "webhook-signature",
        ("webhook-id", "webhook-timestamp"),
    ),
    "stripe": Scheme("stripe", verify_stripe, (), "Stripe-Signature"),
    "github": Scheme(
        "github", verify_github, ("X-GitHub-Delivery",), "X-Hub-Signature-256", ("X-GitHub-Delivery",)
    ),
    "gitlab": Scheme("gitlab", verify_gitlab, ("Idempotency-Key",), "X-Gitlab-Token", ("Idempotency-Key",)),
    "shopify": Scheme(
        "shopify",
        verify_shopify,
        ("X-Shopify-Webhook-Id",),
        "X-Shopify-Hmac-Sha256",
        ("X-Shopify-Webhook-Id",),
    ),
}


def verify(
    scheme: str,
    secret: str,
    headers: Mapping[str, str],
    body: bytes,
    *,
    tolerance_s: int = 300,
    now: float | None = None,
) -> None:
    """Verify a delivery under ``scheme``; raise ``VerificationFailed`` with the reason."""
    SCHEMES[scheme].verify(secret, headers, body, tolerance_s=tolerance_s, now=now)


def sign(
    scheme: str, secret: str, event_id: str, body: bytes, *, timestamp: int | None = None
) -> dict[str, str]:
    """The headers a sender of ``scheme`` would attach to ``body`` (for tests and tooling).

    ``event_id`` fills the scheme's event-id header (Stripe carries it in the body instead).
    """
    ts = int(time.time()) if timestamp is None else timestamp
    if scheme == "standard":
        return {
            "webhook-id": event_id,
            "webhook-timestamp": str(ts),
            "webhook-signature": standard_signature(secret, event_id, ts, body),
        }
    if scheme == "stripe":
        return {"Stripe-Signature": stripe_signature_header(secret, ts, body)}
    if scheme == "github":
        return {
            "X-Hub-Signature-256": github_signature(secret, body),
            "X-GitHub-Delivery": event_id,
            "X-GitHub-Event": "order",
        }
    if scheme == "gitlab":
        return {"X-Gitlab-Token": secret, "Idempotency-Key": event_id, "X-Gitlab-Event": "Order Hook"}
    if scheme == "shopify":
        return {
            "X-Shopify-Hmac-Sha256": shopify_signature(secret, body),
            "X-Shopify-Webhook-Id": event_id,
            "X-Shopify-Topic": "orders/paid",
        }
    raise ValueError(f"unknown scheme {scheme!r}; expected one of {sorted(SCHEMES)}")
