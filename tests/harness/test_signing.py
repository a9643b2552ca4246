"""Sender-side signing agrees with the providers' reference verifiers and published test vectors."""

from __future__ import annotations

import time

import pytest
import stripe
from hypothesis import given
from hypothesis import strategies as st
from standardwebhooks import Webhook

from acklab.app.schemes import verify
from acklab.harness.wire.providers import PROFILES, SCHEMES
from acklab.harness.wire.signing import SIGNERS, Attempt, foreign_secret, redact_headers, signs_timestamp
from tests.harness.conftest import SECRET

bodies = st.binary(min_size=0, max_size=256).map(lambda b: b'{"x":"' + b.hex().encode() + b'"}')


def attempt(body: bytes, *, event_id: str = "evt_1", timestamp: int | None = None) -> Attempt:
    return Attempt(
        event_id, "order.paid", body, int(time.time()) if timestamp is None else timestamp, "uuid-1"
    )


def test_standard_matches_the_spec_test_vector():
    # Standard Webhooks / Svix published vector (webhook-providers.json, standard.signature.test_vector).
    vector = Attempt(
        "msg_loFOjxBNrRLzqYUf", "ping", b'{"event_type":"ping","data":{"success":true}}', 1731705121, ""
    )
    headers = SIGNERS["standard"].headers(vector, "whsec_plJ3nmyCDGBKInavdOK15jsl")
    assert headers["webhook-signature"] == "v1,rAvfW3dJ/X/qxhsaXPOyyCGmRKsaKWcsNccKXlIktD0="


def test_github_matches_the_documented_test_vector():
    vector = Attempt("guid", "ping", b"Hello, World!", 0, "")
    headers = SIGNERS["github"].headers(vector, "It's a Secret to Everybody")
    assert (
        headers["X-Hub-Signature-256"]
        == "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
    )


@given(body=bodies)
def test_standard_signatures_verify_with_the_reference_library(body):
    Webhook(SECRET).verify(body, SIGNERS["standard"].headers(attempt(body), SECRET))


@given(body=bodies)
def test_stripe_signatures_verify_with_stripe_python(body):
    header = SIGNERS["stripe"].headers(attempt(body), SECRET)["Stripe-Signature"]
    assert stripe.WebhookSignature.verify_header(body, header, SECRET, tolerance=300)


@pytest.mark.parametrize("scheme", ["standard", "stripe", "github", "gitlab", "shopify"])
def test_every_scheme_verifies_with_the_fixture_and_a_tampered_body_does_not(scheme):
    body = b'{"id":"evt_1","amount_cents":1200}'
    headers = SIGNERS[scheme].headers(attempt(body), SECRET)
    verify(scheme, SECRET, headers, body)
    with pytest.raises(Exception, match="signature"):
        verify(scheme, SECRET, headers, body.replace(b"1200", b"9900"))
    other = SIGNERS[scheme].headers(attempt(body), foreign_secret(scheme, b"x" * 32))
    with pytest.raises(Exception, match=r"signature|token"):
        verify(scheme, SECRET, other, body)


def test_a_retry_is_signed_afresh_over_the_same_bytes():
    body = b'{"id":"evt_1"}'
    first = SIGNERS["standard"].headers(attempt(body, timestamp=1_700_000_000), SECRET)
    retry = SIGNERS["standard"].headers(attempt(body, timestamp=1_700_000_005), SECRET)
    assert first["webhook-id"] == retry["webhook-id"]
    assert first["webhook-signature"] != retry["webhook-signature"]


def test_signature_and_token_headers_are_redacted():
    headers = SIGNERS["gitlab"].headers(attempt(b"{}"), "legacy-token-value")
    assert headers["X-Gitlab-Token"] == "legacy-token-value"
    assert redact_headers(headers)["X-Gitlab-Token"] == "[redacted]"
    assert (
        redact_headers(SIGNERS["stripe"].headers(attempt(b"{}"), SECRET))["Stripe-Signature"] == "[redacted]"
    )


def test_which_schemes_sign_a_timestamp():
    known = ("standard", "stripe", "github", "gitlab", "shopify", "slack", "none")
    assert [s for s in known if signs_timestamp(s, SECRET)] == ["standard", "stripe", "gitlab", "slack"]
    assert {s for s in SCHEMES if signs_timestamp(s, SECRET)} == {
        s for s in SCHEMES if PROFILES[s].signs_timestamp
    }
    assert not signs_timestamp("gitlab", "legacy-token-value")


def test_profiles_keep_order_and_count_when_compressed():
    for profile in PROFILES.values():
        compressed = profile.compressed_schedule(10_000)
        assert len(compressed) == len(profile.schedule_s)
        assert list(compressed) == sorted(compressed)
        assert compressed[0] == 0
