"""``concurrent-duplicates``: N identical deliveries of one event, released together.

Every request is built and signed first (byte-identical: same body, same headers), then
N tasks wait on one asyncio event and are released in the same loop iteration over a
real socket, so the handler sees them as concurrently as a busy sender's workers would.

The fault landed when at least two duplicates were at the handler at once: the second
request was written before the first answer came back. The burst's arrival spread (first
to last request written) is recorded with it.
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
from acklab.harness.wire.records import DeliveryRecord
from acklab.harness.wire.templates import WebhookEvent


def burst_proof(burst: list[DeliveryRecord]) -> Proof:
    """Whether two or more of `burst` overlapped at the handler; the spread of their arrival."""
    written = sorted(m for d in burst if (m := d.written_mono) is not None)
    answers = sorted(m for d in burst if d.status is not None and (m := d.answered_mono) is not None)
    if len(written) < 2 or not answers:
        return missed(
            f"only {len(written)} of {len(burst)} duplicates were written and {len(answers)} answered; "
            "a burst needs two at the handler"
        )
    spread_ms = (written[-1] - written[0]) * 1000
    first_answer = answers[0]
    together = sum(m < first_answer for m in written)
    facts = {
        "burst": len(burst),
        "spread_ms": round(spread_ms, 3),
        "at_handler_together": together,
        "answered": len(answers),
    }
    if together < 2:
        return missed(
            f"the handler answered the first duplicate before the second was written "
            f"(spread {spread_ms:.1f} ms): nothing was concurrent",
            **facts,
        )
    return landed(
        f"{together} of {len(burst)} duplicates were at the handler before its first answer; "
        f"all written within {spread_ms:.1f} ms",
        **facts,
    )


class ConcurrentDuplicatesExperiment(Experiment):
    name = "concurrent-duplicates"
    description = (
        "N identical deliveries of one event (same body, same signature) released together over a real "
        "socket; a check-then-insert handler races here."
    )
    invariants: ClassVar[tuple[str, ...]] = (
        "at-most-once-effect",
        "acked-exactly-once",
        "eventually-acknowledged",
    )
    fault_name = "concurrent-duplicates"

    def needs(self, target: Target, settings: RunSettings) -> Needs:
        return Needs(socket=True)

    def planned(
        self, target: Target, profile: ProviderProfile, settings: RunSettings
    ) -> tuple[PlannedDelivery, ...]:
        return tuple(
            PlannedDelivery(event=0, kind="duplicate", attempt=1, fault="none", at_ms=0.0, when="always")
            for _ in range(settings.burst)
        )

    async def attempt(self, trial: TrialContext, events: list[WebhookEvent]) -> Proof:
        (event,) = events
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
        return burst_proof([rec for _, rec in prepared])
