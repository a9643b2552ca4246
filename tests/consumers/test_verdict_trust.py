"""Verdicts a maintainer can trust (docs/verdicts.md), on consumers written the way people write them.

Each consumer runs as a process of its own, over a real socket, on SQLite or PostgreSQL; the
lab attacks it through a target spec. Each test runs a scenario a few times; the repetitions
the issue asks for (20/20, 10/10) are a figure of ``bench/verdict_trust.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from acklab.harness.engine.runner import RunResult
from tests.consumers import scenarios
from tests.consumers.scenarios import Scenario

pytestmark = pytest.mark.slow


def trials(result: RunResult, experiment: str) -> list[dict]:
    return [
        json.loads(p.read_text()) for p in sorted((result.bundle / "trials").glob(f"{experiment}-*.json"))
    ]


def check(scenario: Scenario, out: Path, *, runs: int = 1) -> list[RunResult]:
    results = []
    with scenario.started():
        for _ in range(runs):
            result = scenario.run(out)
            assert scenario.mismatches(result) == [], scenario.name
            results.append(result)
    return results


def assert_every_trial_proved_its_fault(result: RunResult) -> None:
    for entry in result.run["experiments"]:
        if entry["verdict"] == "skipped":
            continue
        for trial in trials(result, entry["name"]):
            assert trial["fault"]["landed"] is True, trial["fault"]
            assert trial["verdict"] != "error", trial["error"]


@pytest.mark.parametrize("database", ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def test_an_ack_then_process_consumer_with_a_duplicate_bug_fails_lost_ack_and_concurrent_duplicates(
    tmp_path, request, database
):
    db = request.getfixturevalue("pg_url") if database == "postgresql" else f"sqlite:///{tmp_path}/shop.db"
    scenario = scenarios.ack_then_process(tmp_path, "duplicates", db)
    (result,) = check(scenario, tmp_path / "out")
    assert result.exit_code == 1
    assert_every_trial_proved_its_fault(result)
    lost_ack = next(e for e in result.run["experiments"] if e["name"] == "lost-ack")
    # The second payment was written after the 2xx; the count the verdict rests on waited for it.
    (violation,) = [v for v in lost_ack["violations"] if v["invariant"] == "at-most-once-effect"]
    assert violation["observed"] == 2
    assert violation["delivery"]["kind"] == "retry"  # the retry, not the original, added it
    [trial] = trials(result, "lost-ack")
    assert trial["late_read"]["error"] is None


@pytest.mark.parametrize("database", ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def test_the_same_consumer_written_correctly_passes(tmp_path, request, database):
    db = request.getfixturevalue("pg_url") if database == "postgresql" else f"sqlite:///{tmp_path}/shop.db"
    experiments = scenarios.DEFAULT_SET if database == "sqlite" else ()
    scenario = scenarios.ack_then_process(tmp_path, "correct", db, experiments=experiments)
    (result,) = check(scenario, tmp_path / "out")
    assert result.exit_code == 0
    assert_every_trial_proved_its_fault(result)
    assert {e["fault_landed"] for e in result.run["experiments"]} == {1}


def test_without_effects_within_s_an_ack_then_process_consumer_is_told_to_set_it(tmp_path):
    # An event's row is written only once the next trial's event arrives: the first trial is
    # judged before its row exists and the end-of-run re-read after, on a loaded machine too.
    scenario = scenarios.ack_then_process(
        tmp_path, "correct", f"sqlite:///{tmp_path}/shop.db", work_s=(0.0, 0.0), hold=True
    )
    doc = yaml.safe_load(scenario.spec.read_text())
    del doc["expect"]["effects_within_s"]
    scenarios.write(scenario.spec, doc)
    scenario.experiments = ("concurrent-duplicates",)
    with scenario.started():
        result = scenario.run(tmp_path / "out", trials=2)
    (entry,) = result.run["experiments"]
    assert entry["verdict"] == "fail"  # acknowledged with no effect when judged
    first, last = trials(result, "concurrent-duplicates")
    (violation,) = first["violations"]
    assert violation["invariant"] == "acked-exactly-once"
    # The end-of-run re-read found the effect that came later, and the verdict says what to do.
    assert first["late_read"]["grew"] == [first["event_ids"][0]]
    assert "appeared only by the end of the run" in violation["detail"]
    assert "expect.effects_within_s" in violation["detail"]
    # The last event's row never came (no event followed it): nothing appeared late.
    (violation,) = last["violations"]
    assert violation["invariant"] == "acked-exactly-once"
    assert "appeared only by the end" not in violation["detail"]
    assert not last["late_read"].get("grew")


def test_a_dedupe_by_id_consumer_passes_with_conflict_ignore_and_fails_with_reject(tmp_path):
    (ignored,) = check(scenarios.dedupe_by_id(tmp_path, "ignore", "ignore"), tmp_path / "out")
    assert ignored.exit_code == 0
    [trial] = trials(ignored, "conflicting-payload")
    states = {o["note"]: o.get("state") for o in trial["observations"]}
    assert states["before-conflict"] == states["final"] == states["late"]
    assert "1200" in states["final"]
    (rejected,) = check(scenarios.dedupe_by_id(tmp_path, "ignore", "reject"), tmp_path / "out2")
    (violation,) = rejected.run["experiments"][0]["violations"]
    assert (violation["invariant"], violation["observed"]) == ("conflict-rejected", 200)
    assert "expect.conflict: ignore" in violation["detail"]


def test_a_consumer_that_overwrites_the_amount_fails_conflict_ignore_through_its_state(tmp_path):
    (result,) = check(scenarios.dedupe_by_id(tmp_path, "overwrite", "ignore"), tmp_path / "out")
    assert result.exit_code == 1
    violations = result.run["experiments"][0]["violations"]
    # One row, as before: only the state shows that the conflicting body was applied.
    assert all(v["invariant"] == "conflict-rejected" for v in violations)
    assert any("9900" in str(v["observed"]) and "1200" in v["expected"] for v in violations)
    assert {v["delivery"]["kind"] for v in violations} == {"conflict"}


@pytest.mark.postgres
def test_a_multi_process_gunicorn_service_passes_crash_after_commit_with_no_error(tmp_path, pg_url):
    (result,) = check(scenarios.gunicorn_receipts(tmp_path, pg_url), tmp_path / "out")
    assert result.exit_code == 0
    for trial in trials(result, "crash-after-commit"):
        assert trial["verdict"] == "pass", trial["error"]
        assert trial["parameters"]["strike_outcomes"][-1] == "killed-after-commit-before-response"
        assert trial["deliveries"][-1]["status"] == 200
        assert trial["deliveries"][-1]["service_ready"] is True  # the retry reached a ready service


def test_a_receiver_faster_than_the_calibration_never_passes_vacuously(tmp_path):
    scenario = scenarios.fast_receiver(tmp_path)
    with scenario.started():
        result = scenario.run(tmp_path / "out")
    found = trials(result, "timeout-overlap")
    assert [t["verdict"] for t in found] != []
    for trial in found:
        assert trial["verdict"] in ("pass", "error"), trial["violations"]
        if trial["verdict"] == "pass":
            landed = [t for t in trial["fault"]["tries"] if t["landed"]]
            assert landed, trial["fault"]
            facts = landed[0]["facts"]
            assert facts["handler_ms"] > facts["timeout_ms"]  # the handler was still working
    first = found[0]["fault"]["tries"][0]
    # The calibration saw only the cold first requests: its timeout never fired on a warm one.
    assert first["landed"] is False
    assert "no overlap" in first["evidence"]


def test_a_token_only_gitlab_hook_skips_the_tampered_replay_with_its_reason(tmp_path):
    (result,) = check(scenarios.gitlab_token_hook(tmp_path), tmp_path / "out")
    (entry,) = result.run["experiments"]
    assert set(entry["skipped_variants"]) == {"replay-stale", "replay-tampered", "replay-cross-wired"}
    assert "X-Gitlab-Token" in entry["skipped_variants"]["replay-tampered"]
    assert "replay-tampered skipped" in entry["reason"]
    [trial] = trials(result, "replay")
    assert {d["kind"] for d in trial["deliveries"]} == {"original", "replay-foreign-secret"}
    as_json = result.as_json()["experiments"][0]
    assert "replay-tampered" in as_json["skipped_variants"]


def test_an_unsigned_alertmanager_receiver_lists_replay_as_skipped(tmp_path):
    (result,) = check(scenarios.alert_hook(tmp_path), tmp_path / "out")
    assert result.exit_code == 0
    replay = next(e for e in result.run["experiments"] if e["name"] == "replay")
    assert (replay["verdict"], replay["trials"], replay["incident"]) == ("skipped", 0, None)
    assert "signs nothing" in replay["reason"]
    run_json = json.loads((result.bundle / "run.json").read_text())
    assert any(e["name"] == "replay" and e["verdict"] == "skipped" for e in run_json["experiments"])
    assert next(e for e in result.as_json()["experiments"] if e["name"] == "replay")["reason"]
