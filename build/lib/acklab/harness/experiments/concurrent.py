"""``concurrent-duplicates``: N identical deliveries of one event, released together.

Every request is built and signed first (byte-identical: same body, same headers), then
N tasks wait on one asyncio event and are released in the same loop iteration over a
real socket, so the handler sees them as concurrently as a busy sender's workers would.
"""

from __future__ import annotations

import asyncio
from typing import ClassVar

from acklab.harness.experiments.base import Experiment
from acklab.harness.faults import NoFault
from acklab.harness.plan import PlannedDelivery, Settings
from acklab.harness.providers import ProviderProfile
from acklab.harness.targets import Needs, Target
from acklab.harness.trial import TrialContext


class ConcurrentDuplicatesExperiment(Experiment):
    name = "concurrent-duplicates"
    description = (
        "N identical deliveries of one event (same body, same signature) released together over a real "
        "socket; a check-then-insert handler races here."
    )
    invariants: ClassVar[tuple[str, ...]] = ("at-most-once-effect", "acked-exactly-once")

    def needs(self, target: Target, settings: Settings) -> Needs:
        return Needs(socket=True)

    def planned(
        self, target: Target, profile: ProviderProfile, settings: Settings
    ) -> tuple[PlannedDelivery, ...]:
        return tuple(
            PlannedDelivery(event=0, kind="duplicate", attempt=1, fault="none", at_ms=0.0, when="always")
            for _ in range(settings.burst)
        )

    async def run(self, trial: TrialContext) -> None:
        event = trial.event(0)
        await trial.observe(event, "before")
        first, record = trial.prepare(event, kind="duplicate", attempt=1, fault=NoFault())
        prepared = [(first, record)]
        for _ in range(trial.lab.settings.burst - 1):
            # Same bytes and the same signature headers as the first: true duplicates.
            request, twin = trial.prepare(event, kind="duplicate", attempt=1, fault=NoFault())
            twin.headers = record.headers
            request.headers.update(first.headers)
            prepared.append((request, twin))
        release = asyncio.Event()

        async def one(request_record: tuple[object, object]) -> None:
            await release.wait()
            request, rec = request_record
            await trial.transmit(request, rec)  # type: ignore[arg-type]

        tasks = [asyncio.create_task(one(pair)) for pair in prepared]
        await asyncio.sleep(0)  # every task is now parked on the event
        release.set()
        await asyncio.gather(*tasks)
        trial.parameters["burst"] = len(prepared)
        await trial.settle([event])
