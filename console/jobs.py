"""Behind a queue, as the console shows it: each job's life beside the deliveries it came from
(``jobs`` of the trial record: enqueued, taken by which worker, frozen, killed, restarted,
requeued, acknowledged), each step placed after the delivery sent last before it.

The record is evidence read from disk: the fields were checked by the trial's model when it was
read; text is shown escaped by the template, and bounded here.
"""

from __future__ import annotations

from dataclasses import dataclass

from acklab.evidence.documents.trial import Trial

SHOWN = 200  # steps per trial at most
DETAIL_CHARS = 300


@dataclass(frozen=True)
class JobRow:
    """One step of a job, with the delivery it follows."""

    at: str
    after_seq: int | None  # the last delivery sent before it (None: before any)
    event_id: str | None
    step: str
    by: str  # broker | lab
    worker: str | None
    detail: str


def job_rows(trial: Trial) -> list[JobRow]:
    """The trial's job steps in order, each after the delivery sent last before it."""
    sent = sorted((d.sent_at, d.seq) for d in trial.deliveries)
    rows = []
    for step in (trial.jobs or [])[:SHOWN]:
        after = [seq for at, seq in sent if at <= step.at]
        rows.append(
            JobRow(
                at=step.at[11:23] if len(step.at) >= 23 else step.at,
                after_seq=after[-1] if after else None,
                event_id=step.event_id,
                step=step.step,
                by=step.by,
                worker=step.worker,
                detail=(step.detail or "")[:DETAIL_CHARS],
            )
        )
    return rows
