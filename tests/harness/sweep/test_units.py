"""The sweep's pure parts: redaction, the secrets the writer refuses, database labels, seeds, schemas."""

from __future__ import annotations

import json
from importlib import resources

import pytest

from acklab.evidence.errors import EvidenceInvalid
from acklab.evidence.validate import validate
from acklab.harness.errors import SpecError
from acklab.harness.experiments import EXPERIMENTS
from acklab.harness.specs.credentials import redact
from acklab.harness.sweep.matrix import (
    TEMP_SQLITE,
    Database,
    derive_seed,
    parse_database,
    parse_databases,
    secrets_of,
)


@pytest.mark.parametrize(
    ("url", "redacted"),
    [
        ("postgresql+psycopg://app:s3cret@db:5432/shop", "postgresql+psycopg://app:***@db:5432/shop"),
        ("postgresql://app:p%40ss@127.0.0.1/x", "postgresql://app:***@127.0.0.1/x"),
        ("postgresql://:onlypw@h/x", "postgresql://:***@h/x"),
        ("postgresql://app@h/x", "postgresql://app@h/x"),
        ("sqlite:////tmp/a.db", "sqlite:////tmp/a.db"),
        ("see postgresql://a:b@h/x and mysql://c:d@h/y", "see postgresql://a:***@h/x and mysql://c:***@h/y"),
    ],
)
def test_redact_replaces_every_password(url, redacted):
    assert redact(url) == redacted


def test_the_writer_refuses_the_password_in_every_spelling_but_not_ordinary_text():
    db = parse_database("postgresql+psycopg://app:Correct%2FHorse-9@127.0.0.1:5432/shop")
    found = secrets_of([db, Database(TEMP_SQLITE)])
    assert {":Correct%2FHorse-9@", "Correct%2FHorse-9", "Correct/Horse-9"} <= set(found)
    # A short or common password is refused only in its URL context ("postgres" is in "postgresql").
    short = parse_database("postgresql://postgres:postgres@127.0.0.1/x")
    assert secrets_of([short]) == sorted({"postgresql://postgres:postgres@127.0.0.1/x", ":postgres@"})
    assert secrets_of([parse_database("postgresql://app@h/x")]) == []


def test_database_labels_are_short_without_user_and_fall_back_to_the_redacted_url_when_they_collide():
    assert parse_database("sqlite").label == "sqlite"
    assert (
        parse_database("postgresql+psycopg://u:pw@127.0.0.1:5432/shop").label
        == "postgresql@127.0.0.1:5432/shop"
    )
    assert parse_database("sqlite:////tmp/x.db").label == "sqlite:////tmp/x.db"
    one, two = parse_databases(["postgresql://a:pw@h/x", "postgresql://b:pw@h/x"])
    assert (one.label, two.label) == ("postgresql://a:***@h/x", "postgresql://b:***@h/x")
    assert parse_databases([]) == (Database(TEMP_SQLITE),)
    assert len(parse_databases(["sqlite", "sqlite"])) == 1


@pytest.mark.parametrize("value", ["not a url", "mysql://u@h/x", "://"])
def test_a_database_the_fixture_cannot_use_is_invalid_input(value):
    with pytest.raises(SpecError, match="--db: got"):
        parse_database(value)


def test_run_seeds_are_stable_and_differ_per_target_and_database():
    assert derive_seed(5, "fixture:live", "sqlite") == derive_seed(5, "fixture:live", "sqlite")
    seeds = {derive_seed(5, t, d) for t in ("fixture:live", "fixture:unsafe") for d in ("sqlite", "pg")}
    assert len(seeds) == 4
    assert all(0 <= s < 2**32 for s in seeds)


def minimal_sweep(**changes: object) -> dict[str, object]:
    doc: dict[str, object] = {
        "schema": "acklab/sweep/v1",
        "sweep_id": "sweep-1",
        "status": "complete",
        "verdict": "pass",
        "seed": 1,
        "trials_per_experiment": 1,
        "targets": ["fixture:live"],
        "databases": [{"label": "postgresql@h/x", "url": "postgresql://app:***@h/x"}],
        "experiments": ["lost-ack"],
        "started_at": "2026-01-01T00:00:00Z",
        "ended_at": "2026-01-01T00:00:00Z",
        "runs": [],
        "cells": [],
    }
    doc.update(changes)
    return doc


def test_the_sweep_schema_refuses_an_unredacted_password():
    validate("sweep", minimal_sweep())
    leaky = minimal_sweep(databases=[{"label": "x", "url": "postgresql://app:hunter22@h/x"}])
    with pytest.raises(EvidenceInvalid, match="databases/0/url"):
        validate("sweep", leaky)


def test_the_experiment_schema_accepts_every_stable_experiment():
    schema = json.loads(
        resources.files("acklab.evidence").joinpath("schemas/experiment.schema.json").read_text()
    )
    assert schema["properties"]["uses"]["enum"] == list(EXPERIMENTS)
