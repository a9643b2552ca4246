"""``provider-retries``: the provider's own retry schedule, played compressed, with its retry headers.

Every attempt of the provider's schedule (`ProviderProfile.schedule_s`) is sent, each one with
the consumer's clock moved to that attempt's time (libfaketime, `harness.procs.clock`) and the
attempt's own signature and retry headers (Slack's ``X-Slack-Retry-Num``/``-Reason``,
`harness.wire.retry_policy`). Every acknowledgement but the last is lost (the handler's commit
is confirmed first, as in ``lost-ack``), so the consumer sees the whole schedule: it must end
with exactly one effect and acknowledge before the provider gives up — a consumer that never
does is told what its provider then does ("Stripe stops retrying the event and may disable the
endpoint ... after 3 days of failed deliveries", `eventually-acknowledged`).

Landed: at least one acknowledgement was lost after its commit was seen, and every attempt
reached the consumer with its clock at the attempt's time (the proof keeps each reading).
"""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar

from acklab.harness.core.plan import PlannedDelivery, RunSettings
from acklab.harness.core.proofs import Proof, landed, missed
from acklab.harness.core.trial import TrialContext
from acklab.harness.experiments.base import Experiment
from acklab.harness.experiments.redelivery import shift
from acklab.harness.experiments.retrying import RETRY_INVARIANTS, ack_lost
from acklab.harness.targets import Needs, Target
from acklab.harness.wire.faults import LostAck, NoFault
from acklab.harness.wire.providers import ProviderProfile
from acklab.harness.wire.retry_policy import span
from acklab.harness.wire.templates import WebhookEvent


class ProviderRetriesExperiment(Experiment):
    name = "provider-retries"
    description = (
        "The provider's retry schedule is played compressed, each attempt with its retry headers and the "
        "consumer's clock at that attempt's time; every acknowledgement but the last is lost."
    )
    invariants: ClassVar[tuple[str, ...]] = RETRY_INVARIANTS
    fault_name = "provider-retries"
    default = False

    def applicable(self, target: Target) -> str | None:
        return target.capabilities().lacks_restart()

    def skipped_for(self, target: Target) -> str | None:
        can = target.capabilities()
        return None if can.lacks_restart() else can.lacks_clock()

    def needs(self, target: Target, settings: RunSettings) -> Needs:
        return Needs(socket=True, clock=True)

    def planned(
        self, target: Target, profile: ProviderProfile, settings: RunSettings
    ) -> tuple[PlannedDelivery, ...]:
        schedule = profile.schedule_s
        return tuple(
            PlannedDelivery(
                0,
                "original" if n == 1 else "retry",
                n,
                LostAck.name if n < len(schedule) else "none",
                offset / settings.time_compression * 1000,
                f"the consumer's clock at +{span(offset)}" if offset else "always",
            )
            for n, offset in enumerate(schedule, start=1)
        )

    async def attempt(self, trial: TrialContext, events: list[WebhookEvent]) -> Proof:
        (event,) = events
        profile, settings = trial.lab.profile, trial.lab.settings
        schedule = profile.schedule_s
        await trial.observe(event, "before")
        lost: list[Proof] = []
        shifts: list[Proof] = []
        for n, offset in enumerate(schedule, start=1):
            if n > 1:
                gap = offset - schedule[n - 2]
                await asyncio.sleep(gap / settings.time_compression)
                shifts.append(await shift(trial, gap, f"attempt {n} (+{span(offset)})"))
            last = n == len(schedule)
            record = await trial.send(
                event,
                kind="original" if n == 1 else "retry",
                attempt=n,
                fault=NoFault() if last else LostAck(),
            )
            if not last:
                lost.append(ack_lost(trial, record))
        await trial.settle([event])
        facts: dict[str, Any] = {
            "attempts": len(schedule),
            "acks_lost": sum(p.landed for p in lost),
            "schedule_s": list(schedule),
            "gives_up": profile.retry.consequence(profile.short_name),
        }
        unshifted = [p for p in shifts if not p.landed]
        if unshifted:
            return missed(f"an attempt's clock did not move: {unshifted[0].evidence}", **facts)
        if not any(p.landed for p in lost):
            why = lost[0].evidence if lost else "the schedule has one attempt: nothing to retry"
            return missed(f"no acknowledgement was lost after its commit: {why}", **facts)
        return landed(
            f"{len(schedule)} attempts over {span(schedule[-1])} of the consumer's clock, "
            f"{facts['acks_lost']} acknowledgement(s) lost after the commit was seen; the last attempt "
            "delivered as it was answered",
            **facts,
        )
