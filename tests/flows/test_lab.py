"""How the flow reads a lab run: the harness's own result (its run document), with the reason of an
error when there is one."""

from __future__ import annotations

from pathlib import Path

from acklab.evidence.documents.run import RunDocument
from acklab.flows.lab import imported_from, lab_run
from acklab.harness.engine.runner import RunResult

RUN = {
    "schema": "acklab/run/v1",
    "run_id": "r1",
    "verdict": "error",
    "status": "complete",
    "target": "fixture:live",
    "seed": 7,
    "started_at": "2026-01-01T00:00:00Z",
    "ended_at": "2026-01-01T00:00:01Z",
    "experiments": [
        {"name": "lost-ack", "verdict": "error", "trials": 1, "violations": [], "incident": None,
         "error": "the fixture process exited while starting", "reason": "the commit was never confirmed"},
        {"name": "replay", "verdict": "skipped", "trials": 0, "violations": [], "incident": None,
         "reason": "replay: the scheme signs no body"},
        {"name": "conflicting-payload", "verdict": "pass", "trials": 1, "violations": [], "incident": None},
    ],
}  # fmt: skip


def test_reasons_and_the_run_error_are_read_and_shown(tmp_path):
    result = RunResult.of(RunDocument.read(RUN), tmp_path)
    run = lab_run(result, module=str(tmp_path / "app/webhooks.py"))
    assert run.errored() == ["lost-ack"]
    assert run.error == "lost-ack: the commit was never confirmed"
    assert (
        run.experiments["lost-ack"].line() == "lost-ack: error (0 violations; the commit was never confirmed)"
    )
    assert (
        run.experiments["replay"].line() == "replay: skipped (0 violations; replay: the scheme signs no body)"
    )
    assert run.experiments["conflicting-payload"].line() == "conflicting-payload: pass (0 violations)"
    assert run.experiments["lost-ack"].record().reason == "the commit was never confirmed"
    assert "reason" not in run.experiments["conflicting-payload"].record().dump()


def test_no_module_of_this_process_comes_from_a_fresh_directory(tmp_path):
    assert imported_from(tmp_path) == []
    assert "acklab.flows.lab" in imported_from(Path(__file__).resolve().parents[2])
