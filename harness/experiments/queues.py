"""Consumers behind a queue: the handler enqueues and answers, a worker does the effect (docs/queues.md).

The duplicates and losses of such a consumer come from the queue, not from the sender; each
experiment breaks the queue at one point, on a target with ``workers:`` and ``queues:``, and
is judged by the invariants that exist once the queue drained: at most one effect, exactly
one for every acknowledged event.

* ``worker-crash-after-effect``: the lab waits for the effect, freezes the worker that took
  the job, sees the job still unacknowledged in the queue keys, kills it, and starts it again
  (its supervisor would): the broker hands the job out again after its visibility timeout.
* ``visibility-timeout``: the worker that took the job is frozen for ``queues.hold_s`` (a job
  running long); a second worker may take it meanwhile, and the first finishes when it thaws.
* ``late-duplicate-job``: the original's acknowledgement is lost after its commit was seen; the
  provider's retry arrives only once the queue drained (the job completed and was removed).
* ``broker-restart``: the workers are frozen (and their pending pops answered empty), the
  handler enqueues, the broker is restarted with what it held, then the workers go on.
* ``enqueue-lost``: the broker refuses every write while the handler handles the original
  (``maxmemory``: ``-OOM``); the sender retries only what the handler did not acknowledge.

Each proof says what landed in the broker's own terms: the queue depths read with the worker
frozen, the worker that took the job (its socket), the broker's run id before and after, the
writes it refused per command.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, ClassVar

from acklab.harness.core.plan import PlannedDelivery, RunSettings
from acklab.harness.core.proofs import Proof, landed, missed
from acklab.harness.core.trial import TrialContext
from acklab.harness.errors import HarnessError
from acklab.harness.experiments.base import Experiment, retry_plan
from acklab.harness.experiments.retrying import RETRY_INVARIANTS, ack_lost
from acklab.harness.services.broker import describe, newly_refused
from acklab.harness.targets import Needs, Target
from acklab.harness.targets.capabilities import NO_TAKER
from acklab.harness.targets.queues import QueueControl
from acklab.harness.wire.faults import LostAck
from acklab.harness.wire.providers import ProviderProfile
from acklab.harness.wire.records import DeliveryRecord
from acklab.harness.wire.templates import WebhookEvent

POLL_S = 0.005
# enqueue-lost: writes stay refused this long after the handler answered, so that an enqueue made
# just after the response (a background task, a thread) is refused too.
AFTER_ANSWER_S = 0.25


def queue_of(trial: TrialContext) -> QueueControl:
    queue = trial.lab.endpoint.queue
    if queue is None:
        raise HarnessError("a queue experiment ran on an endpoint whose queue the lab does not follow")
    return queue


def unacknowledged(first: DeliveryRecord) -> Proof:
    """The proof of a try whose original the sender saw unacknowledged, written from what the sender
    saw then (the retries that follow, and a handler's late answer, must not rewrite it)."""
    seen = (
        f"HTTP {first.sender_status}"
        if first.sender_status is not None
        else f"no answer ({first.sender_error or first.sender_outcome or 'none'})"
    )
    return missed(
        f"the sender got {seen} for the original (seq {first.seq}): the provider retries it, so there was "
        "no one acknowledged job to strike"
    )


class _Queued(Experiment):
    invariants: ClassVar[tuple[str, ...]] = RETRY_INVARIANTS
    default: ClassVar[bool] = False
    min_workers: ClassVar[int] = 1
    # Whether it must know which worker took a job (the broker tells its clients apart).
    names_the_taker: ClassVar[bool] = False

    def skipped_for(self, target: Target) -> str | None:
        return target.capabilities().lacks_queue(workers=self.min_workers, named=self.names_the_taker)

    def needs(self, target: Target, settings: RunSettings) -> Needs:
        return Needs(socket=True)

    def planned(
        self, target: Target, profile: ProviderProfile, settings: RunSettings
    ) -> tuple[PlannedDelivery, ...]:
        return retry_plan(profile, settings, "original", self.fault_name)

    async def begin(
        self, trial: TrialContext, events: list[WebhookEvent]
    ) -> tuple[WebhookEvent, QueueControl]:
        """The try's one event, read before anything is sent, and the queue to strike."""
        (event,) = events
        queue = queue_of(trial)
        await trial.observe(event, "before")
        return event, queue

    async def finish(
        self, trial: TrialContext, event: WebhookEvent, started: float, first: DeliveryRecord
    ) -> None:
        """The provider's retries for what the handler did not acknowledge, then the settled count."""
        await trial.retry_until_acked(event, started=started, first=first)
        await trial.settle([event])


class WorkerCrashAfterEffectExperiment(_Queued):
    name = "worker-crash-after-effect"
    description = (
        "A worker does the effect and is killed before it acknowledges the job to the broker (frozen the moment "
        "the effect shows, the job seen unacknowledged, then SIGKILL); it is started again and the broker "
        "hands the job out again after its visibility timeout."
    )
    fault_name = "worker-crash"

    async def attempt(self, trial: TrialContext, events: list[WebhookEvent]) -> Proof:
        event, queue = await self.begin(trial, events)
        since = started = time.monotonic()
        first = await trial.send(event, kind="original", attempt=1)
        if not first.acknowledged:
            proof = unacknowledged(first)
            await self.finish(trial, event, started, first)
            return proof
        probe, object_id = trial.lab.endpoint.probe, trial.object_of(event.event_id)
        deadline = time.monotonic() + queue.drained_within_s
        effects = 0
        while time.monotonic() < deadline:
            effects = await probe.count(event.event_id, object_id)
            if effects >= 1:
                break
            await asyncio.sleep(POLL_S)
        if effects < 1:
            await self.finish(trial, event, started, first)
            return missed(
                f"no effect of {event.event_id} showed within {queue.drained_within_s:g} s of the original"
            )
        taker = queue.taker(since)
        victims = [taker] if taker is not None else list(queue.workers.workers)
        # At once, in this thread (a signal per process group does not block): the window between
        # the effect and the acknowledgement may be short, and a thread pool under load is not.
        queue.workers.freeze(victims)
        names = ", ".join(w.name for w in victims)
        depths = await asyncio.to_thread(queue.depths)
        facts: dict[str, Any] = {"workers": [w.name for w in victims], "queue_at_kill": depths}
        if not any(depths.values()):
            await asyncio.to_thread(queue.workers.thaw, victims)
            await self.finish(trial, event, started, first)
            return missed(
                f"the job was acknowledged before the lab could stop {names} with its effect showing (the queue "
                "was empty once it was frozen): no crash between effect and acknowledgement",
                **facts,
            )
        pids = [w.pid for w in victims]
        await asyncio.to_thread(queue.workers.kill, victims)
        trial.job_step(
            event,
            "killed",
            worker=names,
            detail=f"SIGKILL after the effect, the job unacknowledged ({describe(depths, queue.broker.keys)})",
        )
        await asyncio.to_thread(queue.workers.restart, victims)
        queue.stream.forget_owners()
        trial.job_step(
            event, "restarted", worker=names, detail=f"processes {pids} -> {[w.pid for w in victims]}"
        )
        await self.finish(trial, event, started, first)
        return landed(
            f"{effects} effect of {event.event_id} showed while its job was unacknowledged "
            f"({describe(depths, queue.broker.keys)}); {names} "
            f"{'was' if len(victims) == 1 else 'were'} killed then and started again"
            + ("" if taker is not None else " (the broker's stream named no taker: every worker was killed)"),
            **facts,
        )


class VisibilityTimeoutExperiment(_Queued):
    name = "visibility-timeout"
    description = (
        "The worker that took the job is frozen for queues.hold_s (a job running longer than the broker's "
        "visibility timeout); another worker may take the job meanwhile, and the first one finishes it when "
        "it thaws."
    )
    fault_name = "held-job"
    min_workers = 2
    names_the_taker = True

    async def attempt(self, trial: TrialContext, events: list[WebhookEvent]) -> Proof:
        event, queue = await self.begin(trial, events)
        if not queue.knows_workers:
            return missed(NO_TAKER)
        since = started = time.monotonic()
        first = await trial.send(event, kind="original", attempt=1)
        if not first.acknowledged:
            proof = unacknowledged(first)
            await self.finish(trial, event, started, first)
            return proof
        deadline = time.monotonic() + queue.drained_within_s
        taker = queue.taker(since)
        while taker is None and time.monotonic() < deadline:
            await asyncio.sleep(POLL_S)
            taker = queue.taker(since)
        if taker is None:
            await self.finish(trial, event, started, first)
            return missed(
                f"no worker was seen taking the job within {queue.drained_within_s:g} s (no write by a worker "
                f"to {', '.join(queue.broker.keys)}): list the keys a taken job is kept in under queues:"
            )
        await asyncio.to_thread(taker.freeze)
        held_from = time.monotonic()
        trial.job_step(event, "frozen", worker=taker.name, detail=f"held for up to {queue.hold_s:g} s")
        second = None
        while time.monotonic() - held_from < queue.hold_s:
            taken = [
                s
                for s in queue.steps_since(held_from)
                if s.step == "taken" and s.worker not in (None, taker.name)
            ]
            if taken:
                second = taken[0].worker
                break
            await asyncio.sleep(POLL_S * 4)
        held_s = time.monotonic() - held_from
        await asyncio.to_thread(taker.thaw)
        trial.job_step(event, "thawed", worker=taker.name, detail=f"after {held_s:.2f} s")
        await self.finish(trial, event, started, first)
        facts: dict[str, Any] = {"held_by": taker.name, "held_s": round(held_s, 3), "taken_again_by": second}
        if second is not None:
            return landed(
                f"{taker.name} took the job and was held {held_s:.2f} s; meanwhile {second} took it again",
                **facts,
            )
        return landed(
            f"{taker.name} took the job and was held for queues.hold_s={queue.hold_s:g} s; no other worker took it",
            **facts,
        )


class LateDuplicateJobExperiment(_Queued):
    name = "late-duplicate-job"
    description = (
        "The original is processed and its acknowledgement lost; the provider's retry arrives only after the "
        "queue drained: the first job completed and was removed, and with it a dedupe that lived as long as it."
    )
    fault_name = "late-duplicate"

    def planned(
        self, target: Target, profile: ProviderProfile, settings: RunSettings
    ) -> tuple[PlannedDelivery, ...]:
        return (
            PlannedDelivery(0, "original", 1, LostAck.name, 0, "always"),
            PlannedDelivery(0, "retry", 2, "none", 0, "once the queue drained, until acknowledged"),
        )

    async def attempt(self, trial: TrialContext, events: list[WebhookEvent]) -> Proof:
        event, queue = await self.begin(trial, events)
        started = time.monotonic()
        first = await trial.send(event, kind="original", attempt=1, fault=LostAck())
        lost = ack_lost(trial, first)
        if not lost.landed:
            await self.finish(trial, event, started, first)
            return lost
        why = await queue.wait_drained(trial.lab.settings.settle_ms / 2000)
        effects = await trial.lab.endpoint.probe.count(event.event_id, trial.object_of(event.event_id))
        if why is None:
            trial.job_step(event, "done", detail="the queue drained before the provider's retry")
        await self.finish(trial, event, started, first)
        if why is not None:
            return missed(f"{why}: the retry could not come after the first job completed")
        return landed(
            f"{lost.evidence}; the queue drained ({effects} effect) before the provider's retry was sent",
            **lost.facts,
            effects_before_retry=effects,
        )


class BrokerRestartExperiment(_Queued):
    name = "broker-restart"
    description = (
        "The workers are frozen, the handler enqueues the job, the broker is restarted with what it held (its "
        "clients' connections cut), then the workers go on and must find the job on the new broker."
    )
    fault_name = "broker-restart"

    async def attempt(self, trial: TrialContext, events: list[WebhookEvent]) -> Proof:
        event, queue = await self.begin(trial, events)
        workers = queue.workers.workers
        await asyncio.to_thread(queue.workers.freeze)
        unblocked = await asyncio.to_thread(queue.broker.unblock_all)
        trial.job_step(
            event,
            "frozen",
            worker=", ".join(w.name for w in workers),
            detail=f"{unblocked} pending pops answered empty",
        )
        started = time.monotonic()
        try:
            first = await trial.send(event, kind="original", attempt=1)
            enqueued = await asyncio.to_thread(queue.depths)
            ids = await asyncio.to_thread(queue.restart_broker) if any(enqueued.values()) else None
            kept = await asyncio.to_thread(queue.depths) if ids is not None else {}
        finally:
            await asyncio.to_thread(queue.workers.thaw)
        facts: dict[str, Any] = {"queue_before_restart": enqueued, "queue_after_restart": kept}
        if ids is not None:
            trial.job_step(
                event,
                "broker-restarted",
                detail=f"run id {ids[0][:12]} -> {ids[1][:12]}; held {describe(kept, queue.broker.keys)}",
            )
        trial.job_step(event, "thawed", worker=", ".join(w.name for w in workers))
        await self.finish(trial, event, started, first)
        if ids is None:
            return missed(
                f"the handler answered {first.status} and left nothing in {', '.join(queue.broker.keys)} while the "
                "workers were frozen: no job to carry over a restart",
                **facts,
            )
        if ids[0] == ids[1]:
            return missed("the broker's run id did not change: it was not restarted", **facts)
        return landed(
            f"the job was in the queue ({describe(enqueued, queue.broker.keys)}) when the broker was restarted "
            f"(run id {ids[0][:12]} -> {ids[1][:12]}), with the workers frozen",
            **facts,
        )


class EnqueueLostExperiment(_Queued):
    name = "enqueue-lost"
    description = (
        "The broker refuses every write (out of memory) while the handler handles the original: its enqueue "
        "fails; the sender retries only what the handler did not acknowledge."
    )
    fault_name = "enqueue-refused"

    async def attempt(self, trial: TrialContext, events: list[WebhookEvent]) -> Proof:
        event, queue = await self.begin(trial, events)
        before = await asyncio.to_thread(queue.broker.refused)
        await asyncio.to_thread(queue.broker.refuse_writes)
        started = time.monotonic()
        try:
            first = await trial.send(event, kind="original", attempt=1)
            await asyncio.sleep(AFTER_ANSWER_S)
        finally:
            await asyncio.to_thread(queue.broker.accept_writes)
        refused = newly_refused(before, await asyncio.to_thread(queue.broker.refused))
        if refused:
            trial.job_step(
                event,
                "refused",
                detail=", ".join(f"{c}: {n}" for c, n in refused.items())
                + f"; the handler answered {first.status}",
            )
        await self.finish(trial, event, started, first)
        if not refused:
            return missed(
                f"the handler answered {first.status} without writing to the broker while it refused writes "
                "(does it enqueue on the request's path?)"
            )
        return landed(
            f"the broker refused {sum(refused.values())} write(s) ({', '.join(f'{c}: {n}' for c, n in refused.items())}) "
            f"while the handler handled the original; it answered {first.status}",
            refused=refused,
            handler_status=first.status,
        )
