"""Typed events of a run. The engine emits them; consumers (progress display, journal) react.

Consumers never change the run: an exception in one is reported once on stderr and the
consumer is dropped, so a broken display cannot fail a verdict.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from acklab.evidence.documents.records import Delivery, Observation
from acklab.evidence.documents.run import RunDocument
from acklab.evidence.documents.trial import Trial


@dataclass(frozen=True)
class RunStarted:
    run_id: str
    target: str
    experiments: tuple[str, ...]
    trials_total: int
    trials_done: int  # already finished (resume)
    bundle: str
    started_at: str


@dataclass(frozen=True)
class ExperimentStarted:
    run_id: str
    name: str
    trials: int
    done: int = 0  # finished before (resume)


@dataclass(frozen=True)
class TrialStarted:
    run_id: str
    trial_id: str
    experiment: str
    started_at: str


@dataclass(frozen=True)
class DeliveryRecorded:
    run_id: str
    trial_id: str
    delivery: Delivery


@dataclass(frozen=True)
class ObservationRecorded:
    run_id: str
    trial_id: str
    observation: Observation


@dataclass(frozen=True)
class TrialFinished:
    run_id: str
    record: Trial = field(repr=False)
    checkpoint: str = ""  # the trial file that was written
    sha256: str = ""  # of that file as written (the journal keeps it: a kept trial cannot be edited)

    @property
    def trial_id(self) -> str:
        return self.record.trial_id

    @property
    def experiment(self) -> str:
        return self.record.experiment

    @property
    def verdict(self) -> str:
        return self.record.verdict


@dataclass(frozen=True)
class TrialCheckpointed:
    """A trial's file is about to be written (`rewrite`: again, after the end-of-run re-read).

    Emitted *before* the file is written, so the journal holds its sha256 before the file
    exists: a process killed in between leaves a recorded hash without a file (the trial is
    run again), never a file the journal cannot vouch for."""

    run_id: str
    trial_id: str
    checkpoint: str
    sha256: str
    verdict: str
    rewrite: bool = False


@dataclass(frozen=True)
class ExperimentFinished:
    run_id: str
    name: str
    verdict: str
    trials: int
    violations: int


@dataclass(frozen=True)
class RunFinished:
    run_id: str
    target: str
    verdict: str
    status: str  # complete | interrupted
    started_at: str
    ended_at: str
    bundle: str
    run: RunDocument | None = field(default=None, repr=False)  # None: interrupted before its end


RunEvent = (
    RunStarted
    | ExperimentStarted
    | TrialStarted
    | DeliveryRecorded
    | ObservationRecorded
    | TrialFinished
    | TrialCheckpointed
    | ExperimentFinished
    | RunFinished
)


class Consumer(Protocol):
    """Anything that wants to see the run as it happens."""

    def handle(self, event: RunEvent) -> None: ...


class EventBus:
    """Fans events out to consumers; a failing consumer is dropped, never fatal."""

    def __init__(self, consumers: Sequence[Consumer] = ()) -> None:
        self._consumers = list(consumers)

    def add(self, consumer: Consumer) -> None:
        self._consumers.append(consumer)

    def emit(self, event: RunEvent) -> None:
        for consumer in list(self._consumers):
            try:
                consumer.handle(event)
            except Exception as exc:  # a display or journal bug must not change a verdict
                self._consumers.remove(consumer)
                print(
                    f"acklab: {type(consumer).__name__} stopped: {type(exc).__name__}: {exc}", file=sys.stderr
                )

    def close(self) -> None:
        for consumer in self._consumers:
            close = getattr(consumer, "close", None)
            if callable(close):
                close()
