"""One record per provider: every list of providers is a lookup into `PROVIDERS`, the schema names
the same ones in the same order, the fixture's own list is a subset, and what the lab signs the
fixture verifies — for every provider the two share."""

from __future__ import annotations

import json
import time
from importlib import resources
from typing import get_args

import pytest

from acklab.app.schemes import SCHEMES as APP_SCHEMES
from acklab.app.schemes import verify
from acklab.app.signing import VerificationFailed
from acklab.harness.engine.runner import RunOptions, run
from acklab.harness.init.examples import EXAMPLES
from acklab.harness.sinks.provider_api import PROVIDERS as API_PROVIDERS
from acklab.harness.specs.target import ProviderApiEffects
from acklab.harness.targets.fixture import FIXTURE_SCHEMES
from acklab.harness.targets.spec_checks import EVENT_TYPE_HEADERS
from acklab.harness.wire.providers import PROFILES, PROVIDERS, SCHEMES, Attempt, provider
from acklab.harness.wire.signing import REDACTED_HEADERS, SIGNERS
from tests.app.conftest import SECRET

SCHEMA = json.loads(resources.files("acklab.evidence").joinpath("schemas", "target.schema.json").read_text())


def test_the_schema_names_every_provider_in_the_records_order():
    assert tuple(SCHEMA["properties"]["signing"]["properties"]["scheme"]["enum"]) == SCHEMES


@pytest.mark.parametrize("name", SCHEMES)
def test_a_record_is_one_provider_throughout(name: str):
    record = provider(name)
    assert record.name == record.profile.scheme == record.signer.scheme == name
    assert SIGNERS[name] is record.signer
    assert all(example.provider == name for example in record.examples)
    if record.profile.signature_header is not None:  # what carries the signature is never recorded
        assert record.profile.signature_header.lower() in record.redacted_headers <= REDACTED_HEADERS
    if record.event_type_header is not None:  # set from delivery.event_type, never from headers:
        assert record.event_type_header.lower() in EVENT_TYPE_HEADERS & record.signer.derived
    schedule = record.profile.schedule_s
    assert schedule[0] == 0
    assert list(schedule) == sorted(schedule)
    assert (record.body_event_id is None) == (record.profile.event_id_header is not None) or name == "none"


def test_the_providers_whose_api_the_lab_serves_are_the_records_that_name_its_version():
    served = tuple(name for name, record in PROVIDERS.items() if record.api_version is not None)
    assert served == API_PROVIDERS == ("stripe",)
    section = SCHEMA["properties"]["effects"]["properties"]["provider_api"]["properties"]["provider"]
    assert tuple(section["enum"]) == served
    assert get_args(ProviderApiEffects.model_fields["provider"].annotation) == served


def test_the_fixtures_schemes_are_a_subset_of_the_records():
    assert set(APP_SCHEMES) <= set(PROVIDERS)
    assert set(FIXTURE_SCHEMES) == set(APP_SCHEMES)


@pytest.mark.parametrize("name", sorted(APP_SCHEMES))
def test_what_the_lab_signs_the_fixture_verifies(name: str):
    body = json.dumps({"id": "evt_1", "type": "order.paid"}).encode()
    attempt = Attempt("evt_1", "order.paid", body, int(time.time()), "request-1")
    verify(name, SECRET, SIGNERS[name].headers(attempt, SECRET), body)
    assert APP_SCHEMES[name].timestamped == SIGNERS[name].signs_timestamp(SECRET) or name == "gitlab"


def test_every_example_is_a_records_example():
    assert {e.file for e in EXAMPLES} == {e.file for record in PROVIDERS.values() for e in record.examples}


@pytest.mark.parametrize("name", FIXTURE_SCHEMES)
def test_the_fixture_under_each_scheme_acknowledges_once_and_refuses_every_forgery(name: str, tmp_path):
    """The lab signs as the provider does, the fixture verifies as its consumer would: lost-ack's
    retry is acknowledged once, and replay's stale, tampered and foreign-signed deliveries are
    refused (those that apply to the scheme)."""
    options = RunOptions(
        target=f"fixture:live@{name}", experiments=("lost-ack", "replay"), trials=1, seed=7, out=tmp_path
    )
    result = run(options)
    assert result.verdict == "pass", result.explain()


# Published vectors: what a provider documents (or its SDK's tests pin) for a signature, so the
# lab's signer and the fixture's verifier agree with the provider, not only with each other.
SLACK_DOC_SECRET = "8f742231b10e8888abcd99yyyzzz85a5"  # docs.slack.dev, "Verifying requests from Slack"
SLACK_DOC_BODY = (
    b"token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&"
    b"channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&"
    b"response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&"
    b"trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c"
)
SLACK_DOC_SIGNATURE = "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503"
# PaddleHQ/paddle-python-sdk, tests/Unit/Notification/test_Verifier.py (MIT): the third secret verifies.
PADDLE_SDK_SECRET = "pdl_ntf_01hbpjmytsa32fhr36nqgc3kgb_WvRO0eL4Bj9rgYYIBZY6wZhG4EHy9jzh"
PADDLE_SDK_H1 = "d96299976a6eb066f484d7fde011ac56fc32b38fc9940bc419d6e537fdc6ef02"


def test_slacks_documented_signature_is_the_labs_and_the_fixture_accepts_it():
    attempt = Attempt("Ev1", "event_callback", SLACK_DOC_BODY, 1531420618, "request-1")
    headers = SIGNERS["slack"].headers(attempt, SLACK_DOC_SECRET)
    assert headers["X-Slack-Signature"] == SLACK_DOC_SIGNATURE
    assert headers["X-Slack-Request-Timestamp"] == "1531420618"
    assert "X-Slack-Retry-Num" not in headers  # a first attempt is no retry
    verify("slack", SLACK_DOC_SECRET, headers, SLACK_DOC_BODY, now=1531420618 + 60)
    with pytest.raises(VerificationFailed) as stale:
        verify("slack", SLACK_DOC_SECRET, headers, SLACK_DOC_BODY, now=1531420618 + 301)
    assert stale.value.reason == "stale_timestamp"
    with pytest.raises(VerificationFailed) as tampered:
        verify("slack", SLACK_DOC_SECRET, headers, SLACK_DOC_BODY + b"&x=1", now=1531420618)
    assert tampered.value.reason == "invalid_signature"


def test_a_slack_retry_is_numbered_says_why_and_still_verifies():
    attempt = Attempt("Ev1", "event_callback", b"{}", 1531420618, "request-2")
    headers = {
        **SIGNERS["slack"].headers(attempt, SLACK_DOC_SECRET),
        **PROFILES["slack"].retry.headers(3, "timeout"),
    }
    assert (headers["X-Slack-Retry-Num"], headers["X-Slack-Retry-Reason"]) == ("2", "http_timeout")
    verify("slack", SLACK_DOC_SECRET, headers, b"{}", now=1531420618)
    # a spec's headers: may not set them: they are the provider's
    assert {"x-slack-retry-num", "x-slack-retry-reason"} <= SIGNERS["slack"].derived


def test_paddles_sdk_vector_is_the_labs_and_the_fixture_accepts_it_beside_a_rotated_secret():
    attempt = Attempt("evt_1", "transaction.created", b"hello-world", 1696195954, "request-1")
    header = SIGNERS["paddle"].headers(attempt, PADDLE_SDK_SECRET)["Paddle-Signature"]
    assert header == f"ts=1696195954;h1={PADDLE_SDK_H1}"
    rotated = {"Paddle-Signature": f"ts=1696195954;h1=dummy;h1={PADDLE_SDK_H1}"}
    verify("paddle", PADDLE_SDK_SECRET, rotated, b"hello-world", now=1696195954)
    with pytest.raises(VerificationFailed) as forged:
        verify("paddle", PADDLE_SDK_SECRET + "x", rotated, b"hello-world", now=1696195954)
    assert forged.value.reason == "invalid_signature"


def test_a_slack_retry_after_a_lost_acknowledgement_says_http_error(tmp_path):
    """lost-ack's sender got a 504 (the lab's, in place of the handler's 2xx): Slack's retry of it
    is numbered 1 with the reason http_error, as Slack would send it."""
    result = run(
        RunOptions(target="fixture:live@slack", experiments=("lost-ack",), trials=1, seed=3, out=tmp_path)
    )
    assert result.verdict == "pass", result.explain()
    [trial_file] = (result.bundle / "trials").glob("lost-ack-*.json")
    deliveries = json.loads(trial_file.read_text())["deliveries"]
    first, retry = deliveries[0], next(d for d in deliveries if d["kind"] == "retry")
    assert "X-Slack-Retry-Num" not in first["headers"]
    assert first["sender_outcome"] == "answered"
    assert first["sender_status"] == 504
    assert (retry["headers"]["X-Slack-Retry-Num"], retry["headers"]["X-Slack-Retry-Reason"]) == (
        "1",
        "http_error",
    )
