"""``replica-duplicates``: the original and its duplicate reach different replicas of the consumer.

Production runs several processes behind a balancer; a dedupe kept in one process's memory (a
set, an LRU of seen ids) sees only what reached that process. On a target with
``topology: {replicas: N}`` (N >= 2) each try sends, through the lab's balancer:

* in sequence: the original to one replica and, once it was answered, its duplicate to another;
* together: a second event as a burst split over the replicas (each replica gets its share),
  released at once.

The fault landed when the sequential pair was answered by two different replicas and the burst
reached at least two; each delivery's record names the replica that answered it. On one
replica the experiment is listed skipped: gunicorn's workers inside one process are not
addressable by the lab (docs/fleet.md says which experiments see through them).
"""

from __future__ import annotations

import asyncio
from typing import ClassVar

from acklab.harness.core.plan import PlannedDelivery, RunSettings
from acklab.harness.core.proofs import Proof, landed, missed
from acklab.harness.core.trial import TrialContext
from acklab.harness.experiments.base import Experiment
from acklab.harness.targets import Needs, Target
from acklab.harness.wire.faults import NoFault
from acklab.harness.wire.providers import ProviderProfile
from acklab.harness.wire.templates import WebhookEvent

ONE_REPLICA = (
    "replica-duplicates sends duplicates to different replicas, and this target runs one: set topology: "
    "{replicas: 2} or more in the spec (workers inside one process, gunicorn's, are not addressable)"
)
PER_REPLICA = 2  # the burst's deliveries per replica


class ReplicaDuplicatesExperiment(Experiment):
    name = "replica-duplicates"
    description = (
        "An original and its duplicate are sent to different replicas of the consumer, one after the "
        "other; a second event's duplicates are split over the replicas and released together."
    )
    invariants: ClassVar[tuple[str, ...]] = ("at-most-once-effect", "acked-exactly-once")
    fault_name = "replica-duplicates"
    events_per_try = 2
    default = False

    def skipped_for(self, target: Target) -> str | None:
        return ONE_REPLICA if target.capabilities().replicas < 2 else None

    def needs(self, target: Target, settings: RunSettings) -> Needs:
        return Needs(socket=True)

    def planned(
        self, target: Target, profile: ProviderProfile, settings: RunSettings
    ) -> tuple[PlannedDelivery, ...]:
        burst = max(2, target.capabilities().replicas) * PER_REPLICA
        sequence = (
            PlannedDelivery(0, "original", 1, "none", 0, "always (replica 0)"),
            PlannedDelivery(0, "duplicate", 1, "none", 0, "after the original's answer (replica 1)"),
        )
        together = tuple(
            PlannedDelivery(1, "original" if k == 0 else "duplicate", 1, "none", 0, "released together")
            for k in range(burst)
        )
        return (*sequence, *together)

    async def attempt(self, trial: TrialContext, events: list[WebhookEvent]) -> Proof:
        one, two = events
        replicas = trial.lab.endpoint.replicas
        await trial.observe(one, "before")
        await trial.observe(two, "before")
        first = await trial.send(one, kind="original", replica=0)
        second = await trial.send(one, kind="duplicate", replica=1 % replicas)
        prepared = [
            trial.prepare(
                two,
                kind="original" if k == 0 else "duplicate",
                attempt=1,
                fault=NoFault(),
                replica=k % replicas,
            )
            for k in range(replicas * PER_REPLICA)
        ]
        burst = await asyncio.gather(*(trial.transmit(request, record) for request, record in prepared))
        await trial.settle(events)
        pair = [d.replica for d in (first, second) if d.status is not None]
        spread = sorted({d.replica for d in burst if d.status is not None and d.replica is not None})
        facts = {"pair_replicas": pair, "burst_replicas": spread, "burst": len(burst)}
        if len(set(pair)) < 2:
            return missed(
                f"the original (seq {first.seq}) and its duplicate (seq {second.seq}) were not both answered by "
                f"different replicas (answered by {pair}; {first.error or ''} {second.error or ''})",
                **facts,
            )
        if len(spread) < 2:
            return missed(f"the burst of {len(burst)} was answered by replicas {spread} only", **facts)
        return landed(
            f"the original was answered by replica {pair[0]}, its duplicate by replica {pair[1]}; the burst of "
            f"{len(burst)} duplicates was answered by replicas {spread}",
            **facts,
        )
