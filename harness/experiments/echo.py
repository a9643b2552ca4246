"""``provider-echo``: the provider's webhook about the consumer's own call arrives while that call is still open.

A consumer refunds (or captures) through the provider's API inside its handling of an event; the
provider makes ``charge.refunded`` at once and sends it before the consumer's transaction has
committed the refund it is about to record. A handler of ``charge.refunded`` that checks "is this
refund recorded?" finds nothing and records it too: one refund, recorded twice, and the customer
emailed twice (antiwork/gumroad PR #6193, WooCommerce Stripe #838).

Each try delivers one event; while it is handled, the lab's provider API answers a refund or a
capture only after it has delivered the matching webhook (`harness.sinks.provider_api.stripe_api`:
the echo, signed like every delivery, retried until acknowledged). The event and its echo are
one object (the event's ``:object_id``): judged per object, ``at-most-once-per-object`` — and
the calls the provider executed, ``calls`` — over both. The fault landed when an echo reached the
handler and was answered while the call that caused it was open.
"""

from __future__ import annotations

from typing import ClassVar

from acklab.harness.core.objects import ObjectPlay, counted, observe_before
from acklab.harness.core.plan import PlannedDelivery, RunSettings
from acklab.harness.core.proofs import Proof, landed, missed
from acklab.harness.core.trial import TrialContext
from acklab.harness.experiments.base import Experiment, retry_plan
from acklab.harness.experiments.fetching import api_of, no_provider_api
from acklab.harness.sinks.provider_api import Echo
from acklab.harness.targets import Target
from acklab.harness.wire.providers import ProviderProfile
from acklab.harness.wire.templates import WebhookEvent, encode


class ProviderEchoExperiment(Experiment):
    name = "provider-echo"
    description = (
        "One event; when its handler refunds or captures through the provider's API, the provider sends the "
        "matching webhook (charge.refunded, payment_intent.succeeded) and answers the call only once that "
        "webhook was answered. The event and its echo must leave one effect for their object."
    )
    invariants: ClassVar[tuple[str, ...]] = (
        "at-most-once-per-object",
        "acked-exactly-once",
        "eventually-acknowledged",
    )
    fault_name = "provider-echo"
    default = False
    proves = (
        "a webhook about the consumer's own API call, arriving while that call is open, leaves its object one "
        "effect, not two"
    )

    def applicable(self, target: Target) -> str | None:
        return no_provider_api(target, self.name)

    def planned(
        self, target: Target, profile: ProviderProfile, settings: RunSettings
    ) -> tuple[PlannedDelivery, ...]:
        return retry_plan(profile, settings, "original", "none")

    async def attempt(self, trial: TrialContext, events: list[WebhookEvent]) -> Proof:
        (event,) = events
        api = api_of(trial)
        play = ObjectPlay(self.name, "echo", [event])
        await observe_before(trial, play, state=False)
        answered: list[str] = []

        async def echo(sent: Echo) -> None:
            """Deliver the provider's event about the consumer's call, as it sends every event (the call waits)."""
            document = sent.document
            made = trial.remember(
                WebhookEvent(
                    sent.event_id,
                    event.order_id,
                    event.seq,
                    str(document.get("type", "webhook")),
                    encode(document),
                    document,
                    event.created_at,
                    object_id=event.object_id,
                    event_time=int(document.get("created", event.event_time)),
                )
            )
            play.events.append(made)
            records = await trial.deliver(made)
            play.arrival += records
            answered.extend(f"seq {r.seq} {r.status}" for r in records if r.status is not None)

        with api.echoing(echo):
            play.arrival += await trial.deliver(event)
        play.arrival.sort(key=lambda r: r.seq)
        await trial.settle(play.events if counted(trial) == "events" else [play.primary])
        trial.objects.append(play.case(counted(trial)))
        calls = [r for r in api.calls() if r.echoed and event.event_id in r.events]
        if not calls:
            return missed(
                "the handler made no refund or capture through the provider's API for the event's objects: "
                "nothing for the provider to echo"
            )
        if not answered:
            return missed(
                f"the provider's {len(play.events) - 1} echo(es) got no answer from the handler while the call was "
                "open (its deliveries are in the trial)"
            )
        call = calls[0]
        return landed(
            f"{call.method} {call.path} made {', '.join(e.event_type for e in play.events[1:])}; the handler "
            f"answered it ({', '.join(answered)}) while that call was still open",
            echoes=len(play.events) - 1,
        )
