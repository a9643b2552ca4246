"""Each provider's scheme through the app: reference-library deliveries are accepted, the dedupe
key is the provider's event id (never the signature or timestamp), and forgeries change nothing."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime

import pytest
import stripe
import svix.webhooks

from acklab.app.schemes import SCHEMES, sign
from tests.app.conftest import OTHER_SECRET, SECRET, MakeClient, new_event_id, order_event

Signer = Callable[[str, bytes, str, int], dict[str, str]]  # (event_id, body, secret, timestamp) -> headers


def svix_headers(event_id: str, body: bytes, secret: str, ts: int) -> dict[str, str]:
    signature = svix.webhooks.Webhook(secret).sign(
        event_id, datetime.fromtimestamp(ts, tz=UTC), body.decode()
    )
    return {"svix-id": event_id, "svix-timestamp": str(ts), "svix-signature": signature}


def stripe_headers(event_id: str, body: bytes, secret: str, ts: int) -> dict[str, str]:
    return {
        "Stripe-Signature": stripe.WebhookSignature.generate_signature_header(
            body.decode(), secret, timestamp=ts
        )
    }


def ours(scheme: str) -> Signer:
    return lambda event_id, body, secret, ts: sign(scheme, secret, event_id, body, timestamp=ts)


def gitlab_signed(event_id: str, body: bytes, secret: str, ts: int) -> dict[str, str]:
    # GitLab's signing token: Standard Webhooks headers next to Idempotency-Key, no secret token.
    headers = sign("standard", secret, "wh_" + event_id, body, timestamp=ts)
    return {**headers, "Idempotency-Key": event_id}


# Reference libraries where the provider publishes one; every other scheme the fixture knows is
# signed by its own sender (app.schemes), so a scheme added there is attacked here too.
REFERENCE: dict[str, tuple[str, Signer]] = {
    "svix": ("standard", svix_headers),
    "stripe": ("stripe", stripe_headers),
    "gitlab-token": ("gitlab", ours("gitlab")),
    "gitlab-signing-token": ("gitlab", gitlab_signed),
}
SIGNERS: dict[str, tuple[str, Signer]] = {
    **REFERENCE,
    **{name: (name, ours(name)) for name in SCHEMES if name not in {s for s, _ in REFERENCE.values()}},
}
TIMESTAMPED = {"svix", "stripe", "gitlab-signing-token"} | {
    name for name in SIGNERS if name in SCHEMES and name not in REFERENCE and SCHEMES[name].timestamped
}
# GitLab's legacy secret token is sent verbatim and covers neither body nor time.
BODY_SIGNED = {
    name for name in SIGNERS if name != "gitlab-token" and SCHEMES.get(name, SCHEMES["standard"]).signs_body
}
ATTACKS = [
    (sender, attack)
    for sender in sorted(SIGNERS)
    for attack, applies in (
        ("forged", True),
        ("tampered", sender in BODY_SIGNED),
        ("stale", sender in TIMESTAMPED),
        ("future", sender in TIMESTAMPED),
    )
    if applies
]


@pytest.mark.parametrize("sender", sorted(SIGNERS))
def test_a_provider_delivery_is_accepted_and_its_retry_replayed(make_client: MakeClient, sender: str) -> None:
    scheme, signer = SIGNERS[sender]
    client = make_client(scheme=scheme)
    event_id = new_event_id()
    body = order_event(event_id)

    first = client.deliver(body, signer(event_id, body, SECRET, int(time.time())))
    retry = client.deliver(body, signer(event_id, body, SECRET, int(time.time()) - 7))

    assert first.status_code == 200, first.text
    assert (retry.status_code, retry.headers.get("idempotent-replayed")) == (200, "true")
    assert first.json()["event_id"] == event_id
    assert client.effects(event_id) == 1

    conflicting = order_event(event_id, amount_cents=9900)
    assert (
        client.deliver(conflicting, signer(event_id, conflicting, SECRET, int(time.time()))).status_code
        == 409
    )
    assert client.effects(event_id) == 1


@pytest.mark.parametrize(("sender", "attack"), ATTACKS)
def test_a_forged_or_replayed_provider_delivery_changes_nothing(
    make_client: MakeClient, sender: str, attack: str
) -> None:
    scheme, signer = SIGNERS[sender]
    client = make_client(scheme=scheme)
    event_id = new_event_id()
    body = order_event(event_id)
    ts = int(time.time()) + {"stale": -900, "future": 900}.get(attack, 0)
    headers = signer(event_id, body, OTHER_SECRET if attack == "forged" else SECRET, ts)
    if attack == "tampered":
        body += b" "  # still the same JSON, other bytes than were signed
    rows = client.rows()

    response = client.deliver(body, headers)

    assert response.status_code == 401, response.text
    assert client.rows() == rows
    assert client.effects(event_id) == 0


@pytest.mark.parametrize(
    ("scheme", "header"),
    [("github", "X-GitHub-Delivery"), ("gitlab", "Idempotency-Key"), ("shopify", "X-Shopify-Webhook-Id")],
)
def test_the_dedupe_key_is_the_provider_event_id_header(
    make_client: MakeClient, scheme: str, header: str
) -> None:
    client = make_client(scheme=scheme)
    body = order_event("evt_in_body")
    headers = sign(scheme, SECRET, "delivery-guid-1", body)

    assert client.deliver(body, headers).status_code == 200
    assert client.effects("delivery-guid-1") == 1
    assert client.effects("evt_in_body") == 0

    missing = {name: value for name, value in headers.items() if name != header}
    rows = client.rows()
    response = client.deliver(body, missing)
    assert response.status_code == 422
    assert response.json()["fields"] == [{"field": f"header.{header}", "message": "required"}]
    assert client.rows() == rows


def test_stripe_dedupes_on_the_body_id_across_fresh_signatures(make_client: MakeClient) -> None:
    client = make_client(scheme="stripe", secret="whsec_plain_stripe_secret_not_base64!")
    event_id = new_event_id()
    body = order_event(event_id)
    responses = [
        client.deliver(
            body,
            stripe_headers(event_id, body, "whsec_plain_stripe_secret_not_base64!", int(time.time()) - s),
        )
        for s in (0, 60, 120)
    ]
    assert [r.status_code for r in responses] == [200, 200, 200]
    assert [r.headers.get("idempotent-replayed") for r in responses] == [None, "true", "true"]
    assert client.effects(event_id) == 1
