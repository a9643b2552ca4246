"""Redeliveries the consumer's memory did not survive: after a deploy, and at the end of the
provider's retry window.

Both start like ``lost-ack``: the handler commits and answers 2xx, the lab confirms the commit
and hands the sender a synthetic 504, so the provider owes a retry. Then, before the retry:

* ``restart-redelivery``: the lab stops the consumer (every replica) and starts it again, as a
  deploy does, and waits until it is ready. A dedupe kept in the process's memory is gone.
  The restart is recorded (``parameters.restarts``: when, the processes before and after) and
  an observation ``after-restart`` puts it on the trial's timeline.
* ``late-redelivery``: the lab moves the consumer's clock — its processes and the services the
  lab started for it run under libfaketime (`harness.procs.clock`) — to the end of the
  provider's retry window (`RetryPolicy.window_s`: Stripe three days, Shopify four hours,
  GitHub a scripted redelivery a day later), without waiting, and the retry arrives signed at
  that time. A key with a TTL of minutes has expired, as it would have.

Landed: the original's commit was seen before its acknowledgement was lost, and the restart
replaced every process (restart-redelivery), or the shift shows on the consumer's side —
a witness process under the same preload reads the lab's clock plus the offset, libfaketime
is mapped in every process of the consumer, and each service's own clock moved too
(late-redelivery). The proof records both clocks. A consumer whose clock cannot be shifted
(a static binary, no libfaketime here) is listed skipped with the reason.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, ClassVar

from acklab.harness.core.plan import PlannedDelivery, RunSettings
from acklab.harness.core.proofs import Proof, landed, missed
from acklab.harness.core.trial import TrialContext
from acklab.harness.errors import HarnessError
from acklab.harness.experiments.base import Experiment
from acklab.harness.experiments.retrying import RETRY_INVARIANTS, ack_lost
from acklab.harness.procs.clock import mapped_in
from acklab.harness.targets import Needs, Target
from acklab.harness.wire.faults import LostAck
from acklab.harness.wire.providers import ProviderProfile
from acklab.harness.wire.retry_policy import span
from acklab.harness.wire.templates import WebhookEvent

CLOCK_TOLERANCE_S = 5.0


class _Redelivery(Experiment):
    invariants: ClassVar[tuple[str, ...]] = RETRY_INVARIANTS
    default: ClassVar[bool] = False
    between: ClassVar[str]  # what happens between the original and the retry (the plan says it)

    def applicable(self, target: Target) -> str | None:
        return target.capabilities().lacks_restart()

    def needs(self, target: Target, settings: RunSettings) -> Needs:
        return Needs(socket=True)

    def planned(
        self, target: Target, profile: ProviderProfile, settings: RunSettings
    ) -> tuple[PlannedDelivery, ...]:
        return (
            PlannedDelivery(0, "original", 1, LostAck.name, 0, "always"),
            PlannedDelivery(0, "retry", 2, "none", 0, f"after {self.between}, until acknowledged"),
        )

    async def between_attempts(self, trial: TrialContext, event: WebhookEvent) -> Proof:
        raise NotImplementedError

    async def attempt(self, trial: TrialContext, events: list[WebhookEvent]) -> Proof:
        (event,) = events
        await trial.observe(event, "before")
        started = time.monotonic()
        first = await trial.send(event, kind="original", attempt=1, fault=LostAck())
        lost = ack_lost(trial, first)
        if not lost.landed:
            await trial.retry_until_acked(event, started=started, first=first)
            await trial.settle([event])
            return lost
        done = await self.between_attempts(trial, event)
        await trial.retry_until_acked(event, started=started, first=first)
        await trial.settle([event])
        if not done.landed:
            return done
        return landed(f"{lost.evidence}; then {done.evidence}", **lost.facts, **done.facts)


class RestartRedeliveryExperiment(_Redelivery):
    name = "restart-redelivery"
    description = (
        "The original is processed and its acknowledgement lost; the consumer is stopped and started again "
        "(a deploy, every replica) before the provider's retry arrives."
    )
    fault_name = "restart"
    between = "a restart of the consumer (a deploy)"

    async def between_attempts(self, trial: TrialContext, event: WebhookEvent) -> Proof:
        restart = await asyncio.to_thread(trial.lab.endpoint.restart)
        if restart is None:
            raise HarnessError("restart-redelivery ran on an endpoint whose service the lab does not run")
        trial.parameters.setdefault("restarts", []).append(restart.as_dict())
        await trial.observe(event, "after-restart")
        replaced = not set(restart.pids_before) & set(restart.pids_after) and None not in restart.pids_after
        facts: dict[str, Any] = {"restart_ms": round(restart.took_ms, 1)}
        if not replaced:
            return missed(
                f"the restart did not replace every process (before {list(restart.pids_before)}, after "
                f"{list(restart.pids_after)})",
                **facts,
            )
        return landed(
            f"the consumer was stopped and started again in {restart.took_ms:.0f} ms (processes "
            f"{list(restart.pids_before)} -> {list(restart.pids_after)}) before the retry",
            **facts,
        )


class LateRedeliveryExperiment(_Redelivery):
    name = "late-redelivery"
    description = (
        "The original is processed and its acknowledgement lost; the provider's retry arrives at the end of "
        "its retry window (Stripe: 3 days), the consumer's clock and its services' shifted there by libfaketime."
    )
    fault_name = "late-redelivery"
    between = "the consumer's clock moved to the end of the provider's retry window"

    def skipped_for(self, target: Target) -> str | None:
        can = target.capabilities()
        return None if can.lacks_restart() else can.lacks_clock()

    def needs(self, target: Target, settings: RunSettings) -> Needs:
        return Needs(socket=True, clock=True)

    async def between_attempts(self, trial: TrialContext, event: WebhookEvent) -> Proof:
        window = trial.lab.profile.retry.window_s
        return await shift(
            trial, window, f"the end of {trial.lab.profile.short_name}'s retry window ({span(window)})"
        )


async def shift(trial: TrialContext, by_s: float, why: str) -> Proof:
    """Move the consumer's clock `by_s` further ahead and prove it moved on the consumer's side."""
    endpoint = trial.lab.endpoint
    clock = endpoint.clock
    if clock is None:
        raise HarnessError("a clock experiment ran on an endpoint whose clock the lab does not shift")
    services_before = await asyncio.to_thread(endpoint.service_clocks)
    await asyncio.to_thread(clock.shift_to, clock.offset_s + by_s)
    reading = await asyncio.to_thread(clock.reading)
    services_after = await asyncio.to_thread(endpoint.service_clocks)
    # The consumer's own processes, not a sandbox's wrappers around them (started off the clock).
    pids = [pid for pid in endpoint.consumer_pids() if clock.started_on(pid) is not False]
    mapped = {pid: mapped_in(pid) for pid in pids}
    facts: dict[str, Any] = {
        "clock": reading.as_dict(),
        "shifted_by_s": by_s,
        "services_clock_unix": {k: None if v is None else round(v, 3) for k, v in services_after.items()},
        "consumer_processes": len(pids),
        "libfaketime_mapped": sum(1 for m in mapped.values() if m),
    }
    trial.parameters.setdefault("clock_shifts", []).append(facts)
    if not reading.landed(CLOCK_TOLERANCE_S):
        return missed(
            f"the witness under the shifted clock read {reading.consumer_unix}, not the lab's clock + {reading.offset_s:g} s",
            **facts,
        )
    unshifted = [pid for pid, m in mapped.items() if m is False]
    if not pids or unshifted:
        return missed(
            f"libfaketime is not loaded in the consumer's processes {unshifted or '(none running)'}: "
            "their clock did not move",
            **facts,
        )
    for name, after in services_after.items():
        before = services_before.get(name)
        if before is None or after is None or abs(after - before - by_s) > CLOCK_TOLERANCE_S:
            return missed(
                f"the clock of services: {name} did not move by {by_s:g} s ({before} -> {after})", **facts
            )
    moved = ", ".join(f"{k} {v:.0f}" for k, v in services_after.items() if v is not None)
    return landed(
        f"the consumer's clock was moved to {why}: the lab read {reading.lab_unix:.0f}, the consumer's side "
        f"{reading.consumer_unix:.0f} (offset {reading.offset_s:g} s), libfaketime loaded in all {len(pids)} of "
        f"its processes" + (f", services' clocks {moved}" if moved else ""),
        **facts,
    )
