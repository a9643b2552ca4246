"""Journal consumer: every run event becomes one row of ``<evidence dir>/journal.sqlite``."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

from acklab.evidence.journal import Journal, journal_path
from acklab.harness.core.run_events import (
    DeliveryRecorded,
    ExperimentFinished,
    ExperimentStarted,
    ObservationRecorded,
    RunEvent,
    RunFinished,
    RunStarted,
    TrialCheckpointed,
    TrialFinished,
    TrialStarted,
)


def _plus_ms(timestamp: str, ms: float) -> str:
    """`timestamp` + `ms`, in the records' ISO-8601 UTC form (when the handler's answer came)."""
    start = datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    return (start + timedelta(milliseconds=ms)).isoformat(timespec="microseconds").replace("+00:00", "Z")


class JournalSink:
    """Appends run, experiment, trial, delivery, observation and checkpoint entries."""

    def __init__(self, evidence_dir: Path, *, secrets: list[str]) -> None:
        self._journal = Journal(journal_path(evidence_dir), secrets=secrets)

    def handle(self, event: RunEvent) -> None:
        j = self._journal
        if isinstance(event, RunStarted):
            j.record(
                run_id=event.run_id,
                kind="run",
                name=event.target,
                status="started",
                started_at=event.started_at,
                payload={
                    "experiments": list(event.experiments),
                    "trials": event.trials_total,
                    "already_done": event.trials_done,
                    "bundle": event.bundle,
                },
            )
        elif isinstance(event, ExperimentStarted):
            j.record(
                run_id=event.run_id,
                kind="experiment",
                name=event.name,
                status="started",
                payload={"trials": event.trials},
            )
        elif isinstance(event, TrialStarted):
            j.record(
                run_id=event.run_id,
                kind="trial",
                name=event.trial_id,
                status="started",
                started_at=event.started_at,
            )
        elif isinstance(event, DeliveryRecorded):
            d = event.delivery
            j.record(
                run_id=event.run_id,
                kind="delivery",
                name=f"{event.trial_id}#{d.seq}",
                status="answered" if d.status is not None else "no-answer",
                started_at=d.sent_at,
                ended_at=_plus_ms(d.sent_at, d.latency_ms),
                payload=d.dump(),
            )
        elif isinstance(event, ObservationRecorded):
            o = event.observation
            j.record(
                run_id=event.run_id,
                kind="observation",
                name=f"{event.trial_id}:{o.note}",
                status="ok",
                ended_at=o.at,
                payload=o.dump(),
            )
        elif isinstance(event, TrialFinished):
            record = event.record
            j.record(
                run_id=event.run_id,
                kind="trial",
                name=record.trial_id,
                status=record.verdict,
                started_at=record.started_at,
                ended_at=record.ended_at,
                payload={
                    "violations": [v.dump() for v in record.violations],
                    "error": record.error,
                    "experiment": record.experiment,
                },
            )
        elif isinstance(event, TrialCheckpointed):
            j.record(
                run_id=event.run_id,
                kind="checkpoint",
                name=event.trial_id,
                status="rewritten" if event.rewrite else "ok",
                payload={"file": event.checkpoint, "sha256": event.sha256, "verdict": event.verdict},
            )
        elif isinstance(event, ExperimentFinished):
            j.record(
                run_id=event.run_id,
                kind="experiment",
                name=event.name,
                status=event.verdict,
                payload={"trials": event.trials, "violations": event.violations},
            )
        elif isinstance(event, RunFinished):
            j.record(
                run_id=event.run_id,
                kind="run",
                name=event.target,
                status=event.verdict if event.status == "complete" else "interrupted",
                started_at=event.started_at,
                ended_at=event.ended_at,
                payload={"bundle": event.bundle, "status": event.status},
            )

    def close(self) -> None:
        self._journal.close()
