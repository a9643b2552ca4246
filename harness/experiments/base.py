"""What every experiment is: a stable name, the invariants it checks, a plan, and tries.

An experiment runs a trial as up to `tries` *tries*, each on fresh events: a try injects
the fault, settles the effects and returns a `Proof` of whether the fault landed. The first
try that lands ends the trial; when none does, the trial is an error (never a pass) unless
its records prove a violation (`harness.core.proofs`, `harness.core.verdicts`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import ClassVar

from acklab.evidence.documents.verdicts import ExperimentName
from acklab.harness.core.plan import PlannedDelivery, RunSettings
from acklab.harness.core.proofs import FAULT_TRIES, Proof
from acklab.harness.core.trial import TrialContext
from acklab.harness.targets import Endpoint, Needs, Target
from acklab.harness.wire.providers import ProviderProfile
from acklab.harness.wire.records import DeliveryRecord
from acklab.harness.wire.templates import WebhookEvent


class Experiment(ABC):
    """A fault experiment; it sees a `TrialContext`, never which transport carries it."""

    name: ClassVar[ExperimentName]
    description: ClassVar[str]
    invariants: ClassVar[tuple[str, ...]]
    fault_name: ClassVar[str]  # what the trial's ``fault.name`` and the plan call the fault
    events_per_try: ClassVar[int] = 1  # events under test (judged) in one try
    tries: ClassVar[int] = FAULT_TRIES  # fresh tries when the fault did not land
    calibration_events: ClassVar[int] = 0  # extra events the lab uses to measure (not judged)
    default: ClassVar[bool] = True  # run when no --experiment is named
    bursts: ClassVar[bool] = False  # sends bursts (harness.core.bursts): settings.burst_sync applies
    # What a pass proves (the boundary shown wherever its verdict is).
    proves: ClassVar[str] = (
        "at most one side effect per event, and exactly one for every event the handler acknowledged"
    )

    # Experiments whose trials record an object's running total: totals-match is judged there too.
    judges_totals: ClassVar[bool] = False

    def checks(self, target: Target) -> tuple[str, ...]:
        """The invariants a trial on `target` is judged by: `invariants`, and ``totals-match`` where the
        target keeps a running total (``expect.totals``) and this experiment records one."""
        extra = ("totals-match",) if self.judges_totals and target.expect.totals is not None else ()
        return (*self.invariants, *extra)

    def serve(self, target: Target, needs: Needs) -> AbstractAsyncContextManager[Endpoint]:
        """How the lab serves `target` for this experiment (deeper faults serve it their own way)."""
        return target.serve(needs)

    def per_try(self, target: Target) -> int:
        """How many events under test one try has on `target`."""
        return self.events_per_try

    def events(self, target: Target) -> int:
        """How many events under test one trial may use on `target` (every try's)."""
        return self.per_try(target) * self.tries

    def needs(self, target: Target, settings: RunSettings) -> Needs:
        return Needs()

    def applicable(self, target: Target) -> str | None:
        """None when the experiment can run on `target`, else why not."""
        return None

    def skipped_for(self, target: Target) -> str | None:
        """Why the experiment is pointless on what `target`'s spec says (listed skipped even when
        named, never refused); None: it is not."""
        return None

    def skipped_variants(self, target: Target) -> dict[str, str]:
        """Variants of the experiment that do not apply to `target`: name -> why (listed, never judged)."""
        return {}

    @abstractmethod
    def planned(
        self, target: Target, profile: ProviderProfile, settings: RunSettings
    ) -> tuple[PlannedDelivery, ...]:
        """The deliveries one try sends (retries: those it may send), for `acklab plan`."""

    async def prepare(self, trial: TrialContext) -> None:  # noqa: B027 - optional hook
        """Work done once per trial before its tries (calibration)."""

    @abstractmethod
    async def attempt(self, trial: TrialContext, events: list[WebhookEvent]) -> Proof:
        """One try on fresh `events`: observe 'before', inject the fault, settle to 'final', prove."""

    def calibration_event(self, trial: TrialContext, k: int) -> WebhookEvent:
        """The k-th event the lab measures with (after every try's events; never judged)."""
        return trial.event(self.events(trial.lab.target) + k)

    async def run(self, trial: TrialContext) -> None:
        """Tries on fresh events until the fault lands (at most `tries`)."""
        await self.prepare(trial)
        per = self.per_try(trial.lab.target)
        used = 0
        for k in range(self.tries):
            events = [trial.event(k * per + j) for j in range(per)]
            used += per
            proof = trial.prove(events, await self.attempt(trial, events))
            if proof.landed:
                break
        trial.unjudged.update(trial.plan.event_ids[used : self.events(trial.lab.target)])


def retry_plan(
    profile: ProviderProfile, settings: RunSettings, first_kind: str, first_fault: str, event: int = 0
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


async def deliver_struck(
    trial: TrialContext, event: WebhookEvent, *, strike: Callable[[], object], lift: Callable[[], None]
) -> list[DeliveryRecord]:
    """`event` delivered as the provider would, with a fault of the provider's own struck (`strike`)
    while its first attempt is open and lifted (`lift`) as that attempt is answered: the provider's
    retries, minutes later in real time, find what failed caught up."""
    strike()
    try:
        return await trial.deliver(event, after_first=lambda _: lift())
    finally:
        lift()
