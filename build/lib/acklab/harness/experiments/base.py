"""What every experiment is: a stable name, the invariants it checks, a plan and a run."""

from __future__ import annotations

from abc import ABC, abstractmethod
from contextlib import AbstractAsyncContextManager
from typing import ClassVar

from acklab.harness.plan import PlannedDelivery, Settings
from acklab.harness.providers import ProviderProfile
from acklab.harness.targets import Endpoint, Needs, Target
from acklab.harness.trial import TrialContext


class Experiment(ABC):
    """A fault experiment; it sees a `TrialContext`, never which transport carries it."""

    name: ClassVar[str]
    description: ClassVar[str]
    invariants: ClassVar[tuple[str, ...]]
    events_per_trial: ClassVar[int] = 1  # events under test (judged)
    calibration_events: ClassVar[int] = 0  # extra events the lab uses to measure (not judged)
    default: ClassVar[bool] = True  # run when no --experiment is named

    def serve(self, target: Target, needs: Needs) -> AbstractAsyncContextManager[Endpoint]:
        """How the lab serves `target` for this experiment (deeper faults serve it their own way)."""
        return target.serve(needs)

    def events(self, target: Target) -> int:
        """How many events under test one trial has on `target`."""
        return self.events_per_trial

    def needs(self, target: Target, settings: Settings) -> Needs:
        return Needs()

    def applicable(self, target: Target) -> str | None:
        """None when the experiment can run on `target`, else why not."""
        return None

    @abstractmethod
    def planned(
        self, target: Target, profile: ProviderProfile, settings: Settings
    ) -> tuple[PlannedDelivery, ...]:
        """The deliveries one trial sends (retries: those it may send), for `acklab plan`."""

    @abstractmethod
    async def run(self, trial: TrialContext) -> None:
        """Deliver, observe 'before' and settle to a 'final' observation of every event."""


def retry_plan(
    profile: ProviderProfile, settings: Settings, first_kind: str, first_fault: str, event: int = 0
) -> tuple[PlannedDelivery, ...]:
    schedule = profile.compressed_schedule(settings.time_compression)
    attempts = min(len(schedule), settings.max_attempts)
    return tuple(
        PlannedDelivery(
            event=event,
            kind=first_kind if n == 1 else "retry",
            attempt=n,
            fault=first_fault if n == 1 else "none",
            at_ms=schedule[n - 1] * 1000,
            when="always" if n == 1 else "until acknowledged",
        )
        for n in range(1, attempts + 1)
    )
