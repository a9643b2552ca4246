"""Signatures as providers send them, checked with the providers' own verifiers (stripe, standardwebhooks)
and cryptography's Ed25519: a rotation's signatures together, Standard Webhooks' v1a, raw-bytes bodies."""

from __future__ import annotations

import base64
import json

import pytest
import stripe
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

from acklab.harness.errors import SpecError
from acklab.harness.wire.raw_bodies import FIDELITY_FIELD, VARIANTS, raw_body
from acklab.harness.wire.signatures import public_key
from acklab.harness.wire.signing import SIGNERS, Attempt, foreign_secret, rotated, rotation_format

OLD_STANDARD = "whsec_" + base64.b64encode(b"o" * 24).decode()
NEW_STANDARD = "whsec_" + base64.b64encode(b"n" * 24).decode()
OLD_STRIPE, NEW_STRIPE = "whsec_old0123456789abcdef", "whsec_new0123456789abcdef"
ED25519 = "whsk_" + base64.b64encode(bytes(range(32))).decode()


def attempt(body: bytes = b'{"id":"evt_1","type":"t"}') -> Attempt:
    import time

    return Attempt("evt_1", "t", body, int(time.time()), "uuid")


def both(scheme: str, first: str, second: str) -> dict[str, str]:
    a = attempt()
    return rotated(scheme, [SIGNERS[scheme].headers(a, first), SIGNERS[scheme].headers(a, second)])


def test_stripe_sends_a_v1_per_active_secret_and_the_library_accepts_either():
    headers = both("stripe", OLD_STRIPE, NEW_STRIPE)
    value = headers["Stripe-Signature"]
    assert value.startswith("t=")
    assert value.count(",v1=") == 2
    body = attempt().body.decode()
    for secret in (OLD_STRIPE, NEW_STRIPE):
        assert stripe.WebhookSignature.verify_header(body, value, secret, tolerance=300)
    # a verifier that reads only the first v1= holds the new secret: it fails when the old one comes first
    first_only = value.split(",")[:2]
    with pytest.raises(stripe.SignatureVerificationError):
        stripe.WebhookSignature.verify_header(body, ",".join(first_only), NEW_STRIPE, tolerance=300)


def test_standard_webhooks_sends_a_space_delimited_list_and_the_library_accepts_either():
    headers = both("standard", NEW_STANDARD, OLD_STANDARD)
    assert len(headers["webhook-signature"].split(" ")) == 2
    for secret in (OLD_STANDARD, NEW_STANDARD):
        assert Webhook(secret).verify(attempt().body, headers) == {"id": "evt_1", "type": "t"}
    with pytest.raises(WebhookVerificationError):
        Webhook(foreign_secret("standard", b"x" * 32)).verify(attempt().body, headers)


def test_a_rotation_has_no_overlap_where_a_provider_sends_one_signature():
    assert rotation_format("stripe", NEW_STRIPE) is None
    assert rotation_format("gitlab", NEW_STANDARD) is None
    assert "one signature per delivery" in (rotation_format("github", "secret") or "")
    assert "X-Gitlab-Token" in (rotation_format("gitlab", "legacy-token") or "")


def test_standard_webhooks_v1a_is_ed25519_verified_with_the_public_key():
    signer = SIGNERS["standard"]
    signer.check_secret(ED25519)
    a = attempt()
    headers = signer.headers(a, ED25519)
    version, _, signature = headers["webhook-signature"].partition(",")
    assert version == "v1a"
    published = public_key(ED25519)
    assert published.startswith("whpk_")
    key = Ed25519PublicKey.from_public_bytes(base64.b64decode(published.removeprefix("whpk_")))
    key.verify(base64.b64decode(signature), f"{a.event_id}.{a.timestamp}.".encode() + a.body)
    # libsodium's 64-byte secret key (seed + public key) is the same key
    sodium = "whsk_" + base64.b64encode(bytes(range(32)) + base64.b64decode(published[5:])).decode()
    assert public_key(sodium) == published
    other = foreign_secret("standard", b"e" * 32, like=ED25519)
    assert other.startswith("whsk_")
    assert public_key(other) != published
    with pytest.raises(SpecError, match="32 bytes"):
        signer.check_secret("whsk_" + base64.b64encode(b"short").decode())


@pytest.mark.parametrize("variant", VARIANTS)
def test_raw_bytes_bodies_mean_the_same_json_in_other_bytes(variant):
    document = {
        "id": "evt_raw",
        "type": "charge.refunded",
        "data": {"object": {"amount": 1200, "note": "é/<&>"}},
    }
    compact = json.dumps(document, separators=(",", ":"), ensure_ascii=False)
    body = raw_body(variant, document)
    parsed = json.loads(body)
    parsed.pop(FIDELITY_FIELD, None)
    assert parsed == document
    assert body != compact.encode()
    # what a consumer that re-serialises before verifying would verify: other bytes than were signed
    assert json.dumps(json.loads(body), separators=(",", ":"), ensure_ascii=False).encode() != body
