"""``conflicting-payload``: the same event id with a different body, after the original was processed."""

from __future__ import annotations

from typing import ClassVar

from acklab.harness.experiments.base import Experiment, retry_plan
from acklab.harness.plan import PlannedDelivery, Settings
from acklab.harness.providers import ProviderProfile
from acklab.harness.targets import Target
from acklab.harness.templates import conflicting
from acklab.harness.trial import TrialContext


class ConflictingPayloadExperiment(Experiment):
    name = "conflicting-payload"
    description = (
        "The original is delivered (and retried until acknowledged); once the handler is quiet, a body "
        "that differs (conflict.set) arrives under the same event id. It must be rejected with one of "
        "expect.conflict_status and leave the effects unchanged."
    )
    invariants: ClassVar[tuple[str, ...]] = ("at-most-once-effect", "acked-exactly-once", "conflict-rejected")

    def planned(
        self, target: Target, profile: ProviderProfile, settings: Settings
    ) -> tuple[PlannedDelivery, ...]:
        conflict = PlannedDelivery(
            event=0, kind="conflict", attempt=1, fault="none", at_ms=0.0, when="after quiescence"
        )
        return (*retry_plan(profile, settings, "original", "none"), conflict)

    async def run(self, trial: TrialContext) -> None:
        event = trial.event(0)
        await trial.observe(event, "before")
        await trial.deliver(event)
        await trial.settle([event], note="before-conflict")
        await trial.send(conflicting(event, trial.lab.target.conflict_set), kind="conflict")
        await trial.settle([event])
