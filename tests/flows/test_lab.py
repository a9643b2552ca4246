"""How the flow reads a lab run: `acklab run --json`, with the reason of an error when there is one."""

from __future__ import annotations

from pathlib import Path

from acklab.flows.lab import imported_from, parse_run

DOC = {
    "run_id": "r1",
    "verdict": "error",
    "target": "fixture:live",
    "error": "the fixture process exited while starting",
    "experiments": [
        {"name": "lost-ack", "verdict": "error", "trials": 1, "violations": [], "incident": None,
         "reason": "the commit was never confirmed"},
        {"name": "replay", "verdict": "skipped", "trials": 0, "violations": [], "incident": None,
         "reason": "replay: the scheme signs no body"},
        {"name": "conflicting-payload", "verdict": "pass", "trials": 1, "violations": [], "incident": None},
    ],
    "bundle": None,
}  # fmt: skip


def test_reasons_and_the_run_error_are_read_and_shown(tmp_path):
    run = parse_run(DOC, checkout=tmp_path, exit_code=4, module=str(tmp_path / "app/webhooks.py"))
    assert run.errored() == ["lost-ack"]
    assert run.error == "the fixture process exited while starting"
    assert (
        run.experiments["lost-ack"].line() == "lost-ack: error (0 violations; the commit was never confirmed)"
    )
    assert (
        run.experiments["replay"].line() == "replay: skipped (0 violations; replay: the scheme signs no body)"
    )
    assert run.experiments["conflicting-payload"].line() == "conflicting-payload: pass (0 violations)"
    assert run.experiments["lost-ack"].as_dict()["reason"] == "the commit was never confirmed"
    assert "reason" not in run.experiments["conflicting-payload"].as_dict()


def test_no_module_of_this_process_comes_from_a_fresh_directory(tmp_path):
    assert imported_from(tmp_path) == []
    assert "acklab.flows.lab" in imported_from(Path(__file__).resolve().parents[2])
