"""``race-with-request``: the payment webhook and the app's own request complete one order at once.

The customer's browser returns to "checkout complete" (or the app calls its own confirm
endpoint) at the moment the provider's webhook arrives, and both complete the order: duplicate
orders and double captures (Medusa #13301 and #2341, Saleor #12647 and #14648, WooCommerce
Stripe #889, pretix #1166). Each try plays five objects:

* ``together``: the webhook and the competitor (``competitor:``) released by the burst sender
  (last-byte on h11: both written but their last bytes, then the last bytes in one loop), on
  `TOGETHER` objects one after another: a race a scheduler decides is a matter of chance, and
  three chances catch a 1 ms check-then-insert window in nearly every trial (``make bench``);
* ``webhook-first`` and ``competitor-first``: the near misses, one right after the other's
  answer.

The fault landed when both were answered (the competitor with one of its ``ok_status``) and,
together, both were at the handler before its first answer (the burst's measured spread is
recorded). The object's effects are counted by ``:object_id`` — the competitor's effect has
no event id. Invariants (`harness.core.object_verdicts`): ``at-most-once-per-object``, and
``acked-exactly-once`` for the object.
"""

from __future__ import annotations

from typing import ClassVar

from acklab.harness.core.bursts import send_burst
from acklab.harness.core.objects import (
    ObjectPlay,
    answered,
    arrival_of,
    competitor_request,
    joined,
    observe_before,
    read_after,
    together,
)
from acklab.harness.core.plan import PlannedDelivery, RunSettings
from acklab.harness.core.proofs import Proof, landed, missed
from acklab.harness.core.trial import TrialContext
from acklab.harness.experiments.base import Experiment
from acklab.harness.targets import Needs, Target
from acklab.harness.wire.faults import NoFault
from acklab.harness.wire.providers import ProviderProfile
from acklab.harness.wire.records import DeliveryRecord
from acklab.harness.wire.templates import WebhookEvent

VARIANTS = ("together", "webhook-first", "competitor-first")
TOGETHER = 3  # pairs released together per try, each on an object of its own


class RaceWithRequestExperiment(Experiment):
    name = "race-with-request"
    description = (
        "The webhook and the app's own request that completes the same order (competitor:, a browser "
        "returning to checkout complete) released together by the burst sender, then each right after the "
        "other's answer; the order must have at most max_effects side effects, counted by :object_id."
    )
    invariants: ClassVar[tuple[str, ...]] = ("at-most-once-per-object", "acked-exactly-once")
    fault_name = "race-with-request"
    proves = (
        "at most one side effect per object when the webhook and the app's own request complete it together "
        "or one right after the other, and one once either was answered"
    )
    bursts = True

    def applicable(self, target: Target) -> str | None:
        if target.objects.competitor is None:
            return (
                "the target has no competitor: section (the app's own request that completes the same order, "
                "e.g. POST /checkout/{{order_id}}/complete); add one to race it with the webhook"
            )
        if not target.object_reads().count:
            return (
                "the effects probe counts by :event_id only, and the competitor's effect carries no event id: "
                "count by :object_id (effects.sql.count with :object_id, or {{object_id}} in effects.http.url)"
            )
        return None

    def needs(self, target: Target, settings: RunSettings) -> Needs:
        return Needs(socket=True)

    def per_try(self, target: Target) -> int:
        return len(self.variants())

    @staticmethod
    def variants() -> tuple[str, ...]:
        """The variant of each object of a try, in the order they are played."""
        return (*[VARIANTS[0]] * TOGETHER, *VARIANTS[1:])

    def planned(
        self, target: Target, profile: ProviderProfile, settings: RunSettings
    ) -> tuple[PlannedDelivery, ...]:
        planned = []
        for k, variant in enumerate(self.variants()):
            pair = [
                PlannedDelivery(event=k, kind="original", attempt=1, fault="none", at_ms=0.0, when=variant),
                PlannedDelivery(event=k, kind="competitor", attempt=1, fault="none", at_ms=0.0, when=variant),
            ]
            planned += pair[::-1] if variant == "competitor-first" else pair
        return tuple(planned)

    async def attempt(self, trial: TrialContext, events: list[WebhookEvent]) -> Proof:
        competitor = trial.lab.target.objects.competitor
        if competitor is None:
            raise TypeError("race-with-request on a target without competitor:")
        proofs: list[Proof] = []
        competitors: list[DeliveryRecord] = []
        plays: list[ObjectPlay] = []
        for event, variant in zip(events, self.variants(), strict=True):
            play = ObjectPlay(self.name, variant, [event], competitor=True)
            await observe_before(trial, play, state=False)
            if variant == "together":
                prepared = [
                    trial.prepare(event, kind="original", attempt=1, fault=NoFault()),
                    competitor_request(trial, event),
                ]
                burst = await send_burst(trial, prepared, trial.lab.settings.burst_sync)
                trial.parameters["burst_sync"] = burst.sync
                play.arrival = arrival_of(burst.records)
                competitors.append(prepared[1][1])
                proofs.append(together(burst, "webhook and competitor"))
            else:
                records: list[DeliveryRecord] = []
                if variant == "competitor-first":
                    records.append(await trial.transmit(*competitor_request(trial, event)))
                    await read_after(trial, play, records[-1], state=False)
                records += await trial.deliver(event)
                await read_after(trial, play, records[-1], state=False)
                if variant == "webhook-first":
                    records.append(await trial.transmit(*competitor_request(trial, event)))
                    await read_after(trial, play, records[-1], state=False)
                play.arrival = records
                competitors += [r for r in records if r.kind == "competitor"]
                proofs.append(answered(records, variant) or landed(f"{variant}: both answered"))
            plays.append(play)
        await trial.settle(p.primary for p in plays)  # one settle for every object of the try
        trial.objects += [p.case("object") for p in plays]
        refused = [r for r in competitors if r.status is not None and r.status not in competitor.ok_status]
        if refused:
            first = refused[0]
            proofs.append(
                missed(
                    f"the competitor ({competitor.method} {competitor.url}) was answered {first.status}, not one of "
                    f"competitor.ok_status {list(competitor.ok_status)}: it did not reach the code that completes "
                    "the order"
                )
            )
        return joined(proofs)
