"""crash-after-commit lands on a fast service (gunicorn, 2 workers, an HTTP effects probe):
an answer that beats the probe is withheld from the sender while the lab kills the service's
group (``killed-after-answer``), so in-memory state is still lost and the retry lands on a fresh
process. One run each here; the 20/20 figure is the same scenario in a loop."""

from __future__ import annotations

import json

import pytest

from tests.consumers import scenarios

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("mode", ["durable", "memory-set"])
def test_crash_after_commit_lands_on_a_fast_gunicorn_service_and_finds_in_memory_dedupe(tmp_path, mode):
    scenario = scenarios.fast_ledger(tmp_path, mode)
    result = scenario.run(tmp_path / "out")
    assert scenario.mismatches(result) == []
    assert result.exit_code == (0 if mode == "durable" else 1)
    for path in sorted((result.bundle / "trials").glob("crash-after-commit-*.json")):
        trial = json.loads(path.read_text())
        assert trial["fault"]["landed"] is True, trial["fault"]
        assert trial["verdict"] != "error", trial["error"]
        outcomes = trial["parameters"]["strike_outcomes"]
        assert set(outcomes) <= {"killed-after-answer", "killed-after-commit-before-response"}, outcomes
        if mode == "memory-set":
            # The retry reached a fresh process whose set was empty: a second entry.
            assert {v["invariant"] for v in trial["violations"]} == {"at-most-once-effect"}


@pytest.mark.parametrize("mode", ["memory", "durable"])
def test_crash_after_ack_loses_an_in_memory_queue_and_not_a_durable_inbox(tmp_path, mode):
    scenario = scenarios.answers_first(tmp_path, mode)
    result = scenario.run(tmp_path / "out")
    assert scenario.mismatches(result) == []
    entries = {e["name"]: e for e in result.run["experiments"]}
    # The crash between commit and answer does not apply to a consumer that answers first.
    assert "crash-after-ack" in entries["crash-after-commit"]["reason"]
    (path,) = (result.bundle / "trials").glob("crash-after-ack-*.json")
    trial = json.loads(path.read_text())
    assert trial["fault"]["landed"] is True, trial["fault"]
    assert [d["kind"] for d in trial["deliveries"]] == ["original"]  # acknowledged: never redelivered
    if mode == "memory":
        assert result.exit_code == 1
        assert {v["invariant"] for v in trial["violations"]} == {"acked-exactly-once"}
    else:
        assert result.exit_code == 0
