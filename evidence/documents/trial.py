"""The trial record (``trials/<trial_id>.json``): one trial's deliveries, observations and verdict.

The harness writes one when a trial ends (its checkpoint: ``--resume`` reads it back) and
again after the end-of-run re-read; an incident holds every trial of its experiment.
"""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal

from pydantic import Field

from .base import Document, Omit
from .objects import ObjectCase
from .records import (
    CommitConfirmation,
    Delivery,
    FaultProof,
    JobStep,
    LateRead,
    Observation,
    Timestamp,
    Violation,
)
from .verdicts import Verdict

TRIAL_SCHEMA: Final = "acklab/trial/v1"


class Trial(Document):
    """One trial of one experiment against one target, judged from what it recorded."""

    SCHEMA = "trial"

    schema_: Literal["acklab/trial/v1"] = Field(alias="schema")
    run_id: str
    trial_id: Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9._-]*$")]
    target: str
    experiment: str
    index: Annotated[int, Field(ge=0)]
    seed: int
    event_ids: list[str]
    started_at: Timestamp
    ended_at: Timestamp
    duration_ms: Annotated[float, Field(ge=0)]
    verdict: Verdict
    deliveries: list[Delivery]
    observations: list[Observation]
    violations: list[Violation]
    error: str | None
    commit_confirmations: list[CommitConfirmation] = Field(default_factory=list)
    parameters: dict[str, Any] = Field(default_factory=dict)
    lab_errors: list[str] = Field(default_factory=list)
    fault: Omit[FaultProof] = None
    late_read: Omit[LateRead] = None
    objects: Omit[list[ObjectCase]] = None  # beyond one event: the objects the trial played
    # The pinned schema's change seen by a count of this trial or at the end of the run.
    schema_change: Omit[str] = None
    jobs: Omit[list[JobStep]] = None  # a consumer behind a queue: each job's life beside its deliveries

    def observation(self, event_id: str, note: str) -> Observation | None:
        """The last observation of `event_id` with `note` (``before``, ``final``, ``late`` ...)."""
        found = [o for o in self.observations if o.event_id == event_id and o.note == note]
        return found[-1] if found else None

    @property
    def answered_ms(self) -> list[float]:
        """The latencies of the deliveries the handler answered."""
        return [ms for d in self.deliveries if (ms := d.answered_ms) is not None]
