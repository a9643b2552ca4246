"""Signing and verification, checked against the reference libraries and published test vectors."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

import pytest
import standardwebhooks
import stripe
import svix.webhooks
from hypothesis import given, settings
from hypothesis import strategies as st

from acklab.app.schemes import SCHEMES, sign, verify
from acklab.app.signing import (
    SigningError,
    VerificationFailed,
    decode_whsec,
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
from tests.app.conftest import OTHER_SECRET, SECRET

# Standard Webhooks / Svix test vector (svix-docs "Verifying Webhooks Manually").
VECTOR: dict[str, Any] = {
    "secret": "whsec_plJ3nmyCDGBKInavdOK15jsl",
    "msg_id": "msg_loFOjxBNrRLzqYUf",
    "timestamp": "1731705121",
    "body": b'{"event_type":"ping","data":{"success":true}}',
    "signature": "v1,rAvfW3dJ/X/qxhsaXPOyyCGmRKsaKWcsNccKXlIktD0=",
}
# GitHub's documented example ("Validating webhook deliveries").
GITHUB_VECTOR: dict[str, Any] = {
    "secret": "It's a Secret to Everybody",
    "body": b"Hello, World!",
    "signature": "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17",
}


def _vector_headers(**override: str) -> dict[str, str]:
    return {
        "webhook-id": VECTOR["msg_id"],
        "webhook-timestamp": VECTOR["timestamp"],
        "webhook-signature": VECTOR["signature"],
        **override,
    }


def test_the_standard_webhooks_test_vector_verifies() -> None:
    now = float(VECTOR["timestamp"])
    assert (
        standard_signature(VECTOR["secret"], VECTOR["msg_id"], int(VECTOR["timestamp"]), VECTOR["body"])
        == (VECTOR["signature"])
    )
    verify_standard(VECTOR["secret"], _vector_headers(), VECTOR["body"], now=now)
    with pytest.raises(VerificationFailed) as tampered:
        verify_standard(
            VECTOR["secret"], _vector_headers(), VECTOR["body"].replace(b"true", b"false"), now=now
        )
    assert tampered.value.reason == "invalid_signature"
    with pytest.raises(VerificationFailed) as late:
        verify_standard(VECTOR["secret"], _vector_headers(), VECTOR["body"], now=now + 301)
    assert late.value.reason == "stale_timestamp"
    with pytest.raises(VerificationFailed) as early:
        verify_standard(VECTOR["secret"], _vector_headers(), VECTOR["body"], now=now - 301)
    assert early.value.reason == "future_timestamp"


def test_any_of_several_signatures_may_match_and_other_versions_are_ignored() -> None:
    rotated = f"v1a,aGVsbG8= v1,AAAA{VECTOR['signature'][7:]} not-a-signature {VECTOR['signature']}"
    verify_standard(
        VECTOR["secret"],
        _vector_headers(**{"webhook-signature": rotated}),
        VECTOR["body"],
        now=float(VECTOR["timestamp"]),
    )


def test_the_github_example_verifies() -> None:
    assert github_signature(GITHUB_VECTOR["secret"], GITHUB_VECTOR["body"]) == GITHUB_VECTOR["signature"]
    verify_github(
        GITHUB_VECTOR["secret"], {"X-Hub-Signature-256": GITHUB_VECTOR["signature"]}, GITHUB_VECTOR["body"]
    )
    with pytest.raises(VerificationFailed):
        verify_github(
            GITHUB_VECTOR["secret"], {"X-Hub-Signature-256": GITHUB_VECTOR["signature"]}, b"Hello, World?"
        )


bodies = st.binary(max_size=200).map(lambda b: b.decode("latin-1").encode())  # valid UTF-8 bodies
ids = st.text(alphabet=st.characters(min_codepoint=33, max_codepoint=126), min_size=1, max_size=40)


@settings(max_examples=40, deadline=None)
@given(msg_id=ids, body=bodies, skew=st.integers(-290, 290))
def test_standard_signatures_agree_with_standardwebhooks_and_svix(
    msg_id: str, body: bytes, skew: int
) -> None:
    stamp = datetime.fromtimestamp(int(time.time()) + skew, tz=UTC)
    ours = standard_signature(SECRET, msg_id, int(stamp.timestamp()), body)
    assert ours == standardwebhooks.Webhook(SECRET).sign(msg_id, stamp, body.decode())
    assert ours == svix.webhooks.Webhook(SECRET).sign(msg_id, stamp, body.decode())
    headers = {
        "webhook-id": msg_id,
        "webhook-timestamp": str(int(stamp.timestamp())),
        "webhook-signature": ours,
    }
    standardwebhooks.Webhook(SECRET).verify(body, headers, json_parse=False)  # the peer accepts ours
    verify_standard(SECRET, headers, body)  # and we accept the peer's (the same string)


@settings(max_examples=40, deadline=None)
@given(body=bodies, skew=st.integers(-290, 290))
def test_stripe_signatures_agree_with_stripe_python(body: bytes, skew: int) -> None:
    secret = "whsec_stripe_test_secret"
    ts = int(time.time()) + skew
    ours = stripe_signature_header(secret, ts, body)
    assert ours == stripe.WebhookSignature.generate_signature_header(body.decode(), secret, timestamp=ts)
    assert stripe.WebhookSignature.verify_header(body, ours, secret, tolerance=300)
    verify_stripe(secret, {"Stripe-Signature": ours}, body)


def test_stripe_header_with_v0_and_rotated_v1_signatures_verifies() -> None:
    body, ts = b'{"id": "evt_1"}', int(time.time())
    good = stripe_signature_header("whsec_new", ts, body).split(",")[1]
    old = stripe_signature_header("whsec_old", ts, body).split(",")[1]
    header = f"t={ts},v0=fake,{old},{good}"
    verify_stripe("whsec_new", {"stripe-signature": header}, body)
    verify_stripe("whsec_old", {"stripe-signature": header}, body)
    with pytest.raises(VerificationFailed):
        verify_stripe("whsec_other", {"stripe-signature": header}, body)


def test_stripe_refuses_future_timestamps_unlike_its_library() -> None:
    body, ts = b"{}", int(time.time()) + 900
    with pytest.raises(VerificationFailed) as failed:
        verify_stripe("whsec_x", {"Stripe-Signature": stripe_signature_header("whsec_x", ts, body)}, body)
    assert failed.value.reason == "future_timestamp"


@pytest.mark.parametrize(
    "header",
    ["", "v1=abc", "t=abc,v1=abc", "t=1,t=2,v1=abc", "t={now}", "t={now},v0=x"],
    # Neither ids nor values read the clock at collection: xdist workers must collect the same
    # suite (tests/test_collection.py); the current time is filled in when the test runs.
    ids=["empty", "no-timestamp", "bad-timestamp", "two-timestamps", "no-signature", "v0-only"],
)
def test_malformed_stripe_headers_are_refused(header: str) -> None:
    header = header.replace("{now}", str(int(time.time())))
    with pytest.raises(VerificationFailed) as failed:
        verify_stripe("whsec_x", {"Stripe-Signature": header} if header else {}, b"{}")
    assert failed.value.reason in {"missing_signature", "malformed_signature"}


def test_shopify_signature_is_base64_hmac_of_the_body() -> None:
    body = b'{"id": 1}'
    header = shopify_signature("shpss_secret", body)
    verify_shopify("shpss_secret", {"X-Shopify-Hmac-Sha256": header}, body)
    for bad in (shopify_signature("other", body), "%%%", ""):
        with pytest.raises(VerificationFailed):
            verify_shopify("shpss_secret", {"X-Shopify-Hmac-Sha256": bad} if bad else {}, body)


def test_gitlab_token_and_signing_token() -> None:
    body = b"{}"
    verify_gitlab(SECRET, {"X-Gitlab-Token": SECRET}, body)
    with pytest.raises(VerificationFailed):
        verify_gitlab(SECRET, {"X-Gitlab-Token": SECRET + "x"}, body)
    with pytest.raises(VerificationFailed):
        verify_gitlab(SECRET, {}, body)
    signed = sign("standard", SECRET, "idem-1", body)
    verify_gitlab(SECRET, signed, body)  # signing token only, no secret token
    verify_gitlab(SECRET, {**signed, "X-Gitlab-Token": SECRET}, body)
    with pytest.raises(VerificationFailed):
        verify_gitlab(SECRET, {**signed, "X-Gitlab-Token": "wrong"}, body)
    with pytest.raises(VerificationFailed):
        verify_gitlab(SECRET, sign("standard", OTHER_SECRET, "idem-1", body), body)


@pytest.mark.parametrize("scheme", sorted(SCHEMES))
def test_every_scheme_round_trips_and_refuses_another_secret(scheme: str) -> None:
    body = b'{"id": "evt_1"}'
    verify(scheme, SECRET, sign(scheme, SECRET, "evt_1", body), body)
    with pytest.raises(VerificationFailed) as failed:
        verify(scheme, SECRET, sign(scheme, OTHER_SECRET, "evt_1", body), body)
    assert failed.value.reason == "invalid_signature"


@pytest.mark.parametrize("secret", ["whsec_", "whsec_!!!!", "whsec_abc$", ""])
def test_malformed_standard_secrets_are_refused_without_echoing_them(secret: str) -> None:
    with pytest.raises(SigningError) as failed:
        decode_whsec(secret)
    assert secret.removeprefix("whsec_") == "" or secret.removeprefix("whsec_") not in str(failed.value)


def test_unpadded_secrets_decode_like_the_reference_library() -> None:
    assert decode_whsec("whsec_plJ3nmyCDGBKInavdOK15jsl") == decode_whsec("plJ3nmyCDGBKInavdOK15jsl")
    assert decode_whsec("whsec_YWJj") == b"abc"
    assert decode_whsec("whsec_YWI") == b"ab"
