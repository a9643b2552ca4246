"""The built-in targets: the unsafe fixture fails, the live one passes all six experiments."""

from __future__ import annotations

import json

import pytest

from acklab import DEFAULT_EXPERIMENTS
from acklab.evidence.bundle import verify
from acklab.evidence.journal import Journal, journal_path
from acklab.evidence.validate import validate
from acklab.harness.engine.runner import RunOptions, run


def by_name(result):
    return {e["name"]: e for e in result.run["experiments"]}


@pytest.mark.slow
def test_the_unsafe_fixture_fulfils_one_event_twice_under_lost_ack(tmp_path):
    result = run(RunOptions(target="fixture:unsafe", experiments=("lost-ack",), trials=2, out=tmp_path))
    assert (result.verdict, int(result.exit_code)) == ("fail", 1)
    incident = json.loads((result.bundle / by_name(result)["lost-ack"]["incident"]).read_text())
    validate("incident", incident)
    for trial in incident["trials"]:
        (confirmation,) = trial["commit_confirmations"]
        assert confirmation["confirmed"]
        assert confirmation["synthetic_status"] == 504
        assert [d["sender_status"] for d in trial["deliveries"]] == [504, 200]
        assert [d["status"] for d in trial["deliveries"]] == [200, 200]
        assert trial["observations"][-1]["effects"] == 2
    assert "does not prove exactly-once delivery across systems" in incident["boundary"]


@pytest.mark.slow
def test_the_live_fixture_passes_all_nine_and_the_bundle_holds_no_secret(tmp_path):
    result = run(RunOptions(target="fixture:live", trials=2, out=tmp_path))
    verdicts = {name: e["verdict"] for name, e in by_name(result).items()}
    # every default experiment, beyond one event too: the fixture has a lifecycle, a sibling and
    # a competitor, so none is skipped
    assert len(DEFAULT_EXPERIMENTS) == 9
    assert verdicts == dict.fromkeys(DEFAULT_EXPERIMENTS, "pass"), by_name(result)
    assert result.exit_code == 0
    assert verify(result.bundle).ok
    assert (result.bundle / "reports" / "junit.xml").read_bytes().startswith(b"<?xml")
    assert len(list((result.bundle / "trials").glob("*.json"))) == 18
    # The fixture's secret is random per run; its signatures are redacted everywhere.
    everything = b"".join(p.read_bytes() for p in result.bundle.rglob("*") if p.is_file())
    assert b"whsec_" not in everything
    assert b"[redacted]" in everything
    with Journal(journal_path(tmp_path)) as journal:
        kinds = {entry.kind for entry in journal.history(result.run_id)}
    assert {"run", "experiment", "trial", "delivery", "observation", "checkpoint"} <= kinds


@pytest.mark.slow
@pytest.mark.postgres
def test_on_postgresql_the_live_fixture_passes_and_the_unsafe_one_races(tmp_path, pg_url):
    live = run(RunOptions(target="fixture:live", trials=2, out=tmp_path, db=pg_url))
    assert live.verdict == "pass", live.run["experiments"]
    unsafe = run(
        RunOptions(
            target="fixture:unsafe", experiments=("concurrent-duplicates",), trials=1, out=tmp_path, db=pg_url
        )
    )
    (violation,) = by_name(unsafe)["concurrent-duplicates"]["violations"]
    assert violation["observed"] == 16
