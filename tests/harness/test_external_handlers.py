"""The lab judges handlers it has never seen, served over a real socket through target specs.

Wrong handlers must fail with the right experiment named; correct ones (including a slow
one whose work outlasts the sender's timeout) must pass. One run of each proves the behaviour
here; the rate — every one of 20 runs — is bench/external_handlers.py's figure.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from acklab.harness.engine.runner import RunOptions, RunResult, run
from tests.harness.handlers import (
    SLOW_SENDER_TIMEOUT_S,
    SLOW_WORK_S,
    AcceptsConflicts,
    CheckThenInsert,
    NoDedupe,
    Receipt,
    Serialized,
)


def lab(spec: Path, out: Path, *, experiments: tuple[str, ...] = (), trials: int = 1) -> RunResult:
    return run(RunOptions(target=str(spec), experiments=experiments, trials=trials, out=out, journal=False))


def verdicts(result: RunResult) -> dict[str, str]:
    return {e["name"]: e["verdict"] for e in result.run["experiments"]}


def explain(result: RunResult) -> str:
    return "; ".join(
        f"{e['name']}={e['verdict']} {e['violations'][:1]} {e.get('error') or ''}"
        for e in result.run["experiments"]
    )


@pytest.mark.slow
def test_a_handler_without_dedupe_fails_lost_ack_with_two_effects(serve_handler, tmp_path):
    spec = serve_handler(NoDedupe(), name="no-dedupe")
    result = lab(spec, tmp_path / "out", experiments=("lost-ack",), trials=2)
    assert result.exit_code == 1, explain(result)
    violations = result.run["experiments"][0]["violations"]
    assert {v["invariant"] for v in violations} == {"at-most-once-effect"}
    assert all(v["observed"] == 2 for v in violations)


@pytest.mark.slow
def test_a_check_then_insert_handler_races_under_concurrent_duplicates(serve_handler, tmp_path):
    spec = serve_handler(CheckThenInsert(), name="check-then-insert")
    result = lab(spec, tmp_path / "out", experiments=("lost-ack", "concurrent-duplicates"), trials=3)
    outcome = verdicts(result)
    # Sequential retries find the record; only a concurrent burst gets through the check twice.
    assert outcome == {"lost-ack": "pass", "concurrent-duplicates": "fail"}, explain(result)
    assert result.exit_code == 1


@pytest.mark.slow
def test_a_handler_that_answers_200_to_a_conflict_fails_only_conflicting_payload(serve_handler, tmp_path):
    spec = serve_handler(AcceptsConflicts, name="accepts-conflicts")
    result = lab(spec, tmp_path / "out", trials=1)
    outcome = verdicts(result)
    assert outcome.pop("conflicting-payload") == "fail", explain(result)
    # The spec has no lifecycle:, siblings: or competitor:: those three are listed skipped.
    assert set(outcome.values()) == {"pass", "skipped"}, explain(result)
    (violation,) = next(e for e in result.run["experiments"] if e["name"] == "conflicting-payload")[
        "violations"
    ]
    # The count stayed at one: the 2xx alone is the violation.
    assert (violation["invariant"], violation["observed"]) == ("conflict-rejected", 200)


def _passes(spec: Path, out: Path) -> None:
    result = lab(spec, out)
    assert result.verdict == "pass", explain(result)


@pytest.mark.slow
def test_a_correct_receipt_handler_passes(serve_handler, tmp_path):
    _passes(serve_handler(Receipt(), name="receipt"), tmp_path / "out")


@pytest.mark.slow
@pytest.mark.postgres
def test_a_correct_serialized_handler_on_postgresql_passes(serve_handler, tmp_path, pg_url):
    _passes(serve_handler(Serialized(), name="serialized", db_url=pg_url), tmp_path / "out")


@pytest.mark.slow
def test_a_correct_but_slow_handler_passes(serve_handler, tmp_path):
    # Its work, holding the claim, outlasts the sender's timeout: every first attempt times out
    # and the sender retries into a handler that is still working.
    spec = serve_handler(Receipt(delay_s=SLOW_WORK_S), name="slow-receipt", timeout_s=SLOW_SENDER_TIMEOUT_S)
    _passes(spec, tmp_path / "out")
