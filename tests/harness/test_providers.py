"""One record per provider: every list of providers is a lookup into `PROVIDERS`, the schema names
the same ones in the same order, the fixture's own list is a subset, and what the lab signs the
fixture verifies — for every provider the two share."""

from __future__ import annotations

import json
import time
from importlib import resources

import pytest

from acklab.app.schemes import SCHEMES as APP_SCHEMES
from acklab.app.schemes import verify
from acklab.harness.engine.runner import RunOptions, run
from acklab.harness.init.examples import EXAMPLES
from acklab.harness.targets.fixture import FIXTURE_SCHEMES
from acklab.harness.targets.spec_checks import EVENT_TYPE_HEADERS
from acklab.harness.wire.providers import PROVIDERS, SCHEMES, Attempt, provider
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
