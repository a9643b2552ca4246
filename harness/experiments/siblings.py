"""``sibling-events``: one change, several events — each a fresh event id for the same object.

``invoice.paid`` and ``invoice.payment_succeeded``, ``checkout.session.completed`` and
``payment_intent.succeeded``, Shopify ``orders/create`` and ``orders/paid``: a consumer that
fulfils on each fulfils twice, and per-event dedupe cannot see it (every id is new). Each
try plays two objects: the event and its siblings (``siblings:``) one after another
(``sequential``, the object's effects read after each), and all of them in one synchronised
burst (``burst``, `harness.core.bursts`). The fault landed when every delivery was answered
and the burst's deliveries were at the handler together (its measured spread is recorded).
Invariants (`harness.core.object_verdicts`): ``at-most-once-per-object``, and
``acked-exactly-once`` for the object.
"""

from __future__ import annotations

from typing import ClassVar

from acklab.harness.core.bursts import send_burst
from acklab.harness.core.objects import (
    ObjectPlay,
    answered,
    arrival_of,
    counted,
    joined,
    observe_before,
    read_after,
    sibling_events,
    together,
)
from acklab.harness.core.plan import PlannedDelivery, RunSettings
from acklab.harness.core.proofs import Proof, landed
from acklab.harness.core.trial import TrialContext
from acklab.harness.experiments.base import Experiment
from acklab.harness.targets import Needs, Target
from acklab.harness.wire.faults import NoFault
from acklab.harness.wire.providers import ProviderProfile
from acklab.harness.wire.records import DeliveryRecord
from acklab.harness.wire.templates import WebhookEvent

VARIANTS = ("sequential", "burst")


class SiblingEventsExperiment(Experiment):
    name = "sibling-events"
    description = (
        "The event and its siblings (siblings: other events the provider emits for the same change, each a "
        "fresh event id for the same object) delivered one after another, then all in one synchronised "
        "burst; the object must have at most max_effects side effects."
    )
    invariants: ClassVar[tuple[str, ...]] = ("at-most-once-per-object", "acked-exactly-once")
    fault_name = "sibling-events"
    proves = (
        "at most one side effect per object across an event and its siblings, and one for an acknowledged one"
    )
    bursts = True

    def applicable(self, target: Target) -> str | None:
        if target.objects.siblings:
            return None
        return (
            "the target has no siblings: section (other events the provider emits for the same change as "
            "event:, e.g. invoice.payment_succeeded beside invoice.paid); add one to send them together"
        )

    def needs(self, target: Target, settings: RunSettings) -> Needs:
        return Needs(socket=True)

    def per_try(self, target: Target) -> int:
        return len(VARIANTS) * (1 + len(target.objects.siblings))

    def planned(
        self, target: Target, profile: ProviderProfile, settings: RunSettings
    ) -> tuple[PlannedDelivery, ...]:
        n = 1 + len(target.objects.siblings)
        sequential = [
            PlannedDelivery(
                event=k,
                kind="original",
                attempt=1,
                fault="none",
                at_ms=0.0,
                when="sequential, until acknowledged",
            )
            for k in range(n)
        ]
        burst = [
            PlannedDelivery(
                event=n + k,
                kind="original",
                attempt=1,
                fault="none",
                at_ms=0.0,
                when="burst, released together",
            )
            for k in range(n)
        ]
        return (*sequential, *burst)

    async def attempt(self, trial: TrialContext, events: list[WebhookEvent]) -> Proof:
        n = 1 + len(trial.lab.target.objects.siblings)
        probed = trial.lab.endpoint.state is not None
        proofs: list[Proof] = []
        # sequential: the event, then each sibling, each retried until acknowledged
        play = ObjectPlay(self.name, "sequential", sibling_events(trial, events[:n]))
        await observe_before(trial, play, state=probed)
        sent: list[DeliveryRecord] = []
        for event in play.events:
            records = await trial.deliver(event)
            play.arrival += records
            sent += records
            await read_after(trial, play, records[-1], state=probed)
        plays = [play]
        proofs.append(
            answered(sent, "sequential") or landed(f"sequential: all {len(sent)} deliveries answered")
        )
        # burst: the event and its siblings released together
        play = ObjectPlay(self.name, "burst", sibling_events(trial, events[n : 2 * n]))
        await observe_before(trial, play, state=probed)
        prepared = [trial.prepare(e, kind="original", attempt=1, fault=NoFault()) for e in play.events]
        burst = await send_burst(trial, prepared, trial.lab.settings.burst_sync)
        trial.parameters["burst_sync"] = burst.sync
        play.arrival = arrival_of(burst.records)
        plays.append(play)
        # One settle for both objects; counted by object, each object's first event says it all.
        by_object = counted(trial) == "object"
        await trial.settle(e for p in plays for e in (p.events[:1] if by_object else p.events))
        trial.objects += [p.case(counted(trial)) for p in plays]
        proofs.append(together(burst, f"burst of the event and {n - 1} sibling(s)"))
        return joined(proofs)
