"""``concurrent-duplicates``: N identical deliveries of one event, released together.

Every request is built and signed first (byte-identical: same body, same headers), then
released as one burst (`harness.core.bursts`) over a real socket: by default each is written on
its own pre-opened connection but its last byte, and the last bytes go in one tight loop
(``burst_sync: last-byte``); over HTTP/2 all of them can leave in one TCP packet
(``single-packet``); ``none`` is the naive release (each connects after it).

The fault landed when at least two duplicates were at the handler at once: the second
request was written before the first answer came back. The burst's arrival spread is
recorded with it: the sender's (first to last final byte written) always, the handler's
(first to last request entering it) where the handler reports it. A target that closed a
connection while its request was half-sent answered nothing: the burst is not the one
designed, and the try does not land.

When the sender received no 2xx for any duplicate (each timed out behind the first, say),
it retries on the provider's schedule, as a provider would: ``eventually-acknowledged``
judges the event on what the sender received.
"""

from __future__ import annotations

import time
from typing import ClassVar

from acklab.harness.core.bursts import Burst, send_burst
from acklab.harness.core.plan import PlannedDelivery, RunSettings
from acklab.harness.core.proofs import Proof, landed, missed
from acklab.harness.core.trial import TrialContext, sender_acked
from acklab.harness.experiments.base import Experiment, retry_plan
from acklab.harness.targets import Needs, Target
from acklab.harness.wire.faults import NoFault
from acklab.harness.wire.providers import ProviderProfile
from acklab.harness.wire.templates import WebhookEvent


def burst_proof(burst: Burst) -> Proof:
    """Whether two or more of the burst overlapped at the handler; the spread of their arrival."""
    records = burst.records
    written = sorted(m for d in records if (m := d.written_mono) is not None)
    answers = sorted(m for d in records if d.status is not None and (m := d.answered_mono) is not None)
    facts = {"burst": len(records), **burst.facts()}
    if burst.closed_half_sent:
        return missed(
            f"the target closed {burst.closed_half_sent} of {len(records)} connections while their requests "
            "were half-sent (the last byte held back for the release) and answered nothing there: those "
            "deliveries are errors, and the burst is not the one designed",
            **facts,
        )
    if len(written) < 2 or not answers:
        return missed(
            f"only {len(written)} of {len(records)} duplicates were written and {len(answers)} answered; "
            "a burst needs two at the handler",
            **facts,
        )
    first_answer = answers[0]
    together = sum(m < first_answer for m in written)
    facts.update(at_handler_together=together, answered=len(answers))
    if together < 2:
        return missed(
            f"the handler answered the first duplicate before the second was written "
            f"({burst.describe()}): nothing was concurrent",
            **facts,
        )
    return landed(
        f"{together} of {len(records)} duplicates were at the handler before its first answer; {burst.describe()}",
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
    judges_totals = True
    bursts = True

    def needs(self, target: Target, settings: RunSettings) -> Needs:
        return Needs(socket=True)

    def planned(
        self, target: Target, profile: ProviderProfile, settings: RunSettings
    ) -> tuple[PlannedDelivery, ...]:
        burst = tuple(
            PlannedDelivery(event=0, kind="duplicate", attempt=1, fault="none", at_ms=0.0, when="always")
            for _ in range(settings.burst)
        )
        return (*burst, *retry_plan(profile, settings, "duplicate", "none")[1:])

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
        started = time.monotonic()
        burst = await send_burst(trial, prepared, trial.lab.settings.burst_sync)
        trial.parameters["burst"] = len(prepared)
        trial.parameters["burst_sync"] = burst.sync
        # The provider retries an event none of whose deliveries it saw acknowledged (every
        # duplicate timed out behind the first, say): eventually-acknowledged judges those too.
        received = [r for _, r in prepared if sender_acked(r)]
        await trial.retry_until_acked(event, started=started, first=received[0] if received else record)
        trial.expect_total([event])
        await trial.settle([event])
        return burst_proof(burst)
