"""``fetch-lag``, ``fetch-stale``, ``fetch-throttled``: the consumer re-fetches what the event names, and the API misbehaves.

Real consumers fetch the object a (thin) event names before acting on it — pretix and
dj-stripe on every event; Stripe's thin events make it the norm. The provider's API is not a
database the consumer owns: the webhook can arrive before the provider's own commit reached the
replica it reads (``404 resource_missing``), a replica can serve the version before the event
(a payment intent still ``processing``), and the API rate-limits (``429`` with ``Retry-After``).
A consumer that answers 2xx without the effect — it dropped the event on the 404, trusted the
stale status, swallowed the 429 — told the provider the work was done: the provider never sends
the event again (``acked-exactly-once``). One that answers 5xx gets the provider's retry, by
which time the API has caught up.

Each try delivers one event as the provider would, with the fault armed on the provider's API
for the event and the objects it made (`harness.sinks.provider_api.faults`) while its first
attempt is open; the fault is lifted as the first attempt is answered, so the provider's retries
find the API caught up. The fault landed when the API served it at least once (a served 404 or
429 — or a stale version — is the fault landing); a consumer that never called the API for the
event's objects is no evidence of how it survives one.
"""

from __future__ import annotations

from typing import ClassVar

from acklab.harness.core.plan import PlannedDelivery, RunSettings
from acklab.harness.core.proofs import Proof, landed, missed
from acklab.harness.core.trial import TrialContext
from acklab.harness.experiments.base import Experiment, deliver_struck, retry_plan
from acklab.harness.sinks.provider_api import ProviderApi
from acklab.harness.sinks.provider_api.faults import ApiFault, Lag, Stale, Throttle
from acklab.harness.targets import Target
from acklab.harness.wire.providers import ProviderProfile
from acklab.harness.wire.templates import WebhookEvent

FETCH_INVARIANTS = ("at-most-once-effect", "acked-exactly-once", "eventually-acknowledged")


def no_provider_api(target: Target, name: str) -> str | None:
    """Why `name` cannot run on `target` (None: the lab serves it the provider's API)."""
    why = target.capabilities().lacks_provider_api()
    return f"{name} makes the provider's API misbehave, and {why}" if why is not None else None


def api_of(trial: TrialContext) -> ProviderApi:
    sinks = trial.lab.endpoint.sinks
    if sinks is None or sinks.provider_api is None:
        raise TypeError("a provider's-API experiment on a target the lab serves no API for")
    return sinks.provider_api


class FetchFaultExperiment(Experiment):
    """One event delivered while the provider's API answers its objects with `fault`, until its first attempt ends."""

    invariants: ClassVar[tuple[str, ...]] = FETCH_INVARIANTS
    default = False
    what: ClassVar[str]  # the served fault, in words

    def fault(self) -> ApiFault:
        raise NotImplementedError

    def applicable(self, target: Target) -> str | None:
        return no_provider_api(target, self.name)

    def planned(
        self, target: Target, profile: ProviderProfile, settings: RunSettings
    ) -> tuple[PlannedDelivery, ...]:
        return retry_plan(profile, settings, "original", self.fault_name)

    async def attempt(self, trial: TrialContext, events: list[WebhookEvent]) -> Proof:
        (event,) = events
        api = api_of(trial)
        await trial.observe(event, "before")
        trial.emit(event)  # the provider made its objects; the fault stands between them and the consumer
        touched = api.store.objects_of(event.event_id)
        if not touched:
            await trial.deliver(event)
            await trial.settle([event])
            return missed(
                "the event names no object the provider's API serves (its data.object has no Stripe id such as "
                "pi_..., ch_..., cs_...), so there was nothing to fetch"
            )
        records = await deliver_struck(
            trial,
            event,
            strike=lambda: api.arm(event.event_id, self.fault()),
            lift=lambda: api.disarm(event.event_id),
        )
        await trial.settle([event])
        served = api.served(event.event_id)
        trial.parameters.setdefault("api_faults", {})[event.event_id] = [
            f"{r.method} {r.path} -> {r.status} ({r.served})" for r in served[:10]
        ]
        if not served:
            return missed(
                f"the handler made no call on the event's objects ({', '.join(sorted(touched))}) while its "
                f"first attempt was open (answered {records[0].status}): the API never had a chance to {self.what}"
            )
        calls = "; ".join(f"{r.method} {r.path} -> {r.status}" for r in served[:5])
        return landed(
            f"the provider's API served {len(served)} call(s) {self.what} during the first attempt ({calls}), then "
            f"caught up for the provider's retries",
            served=len(served),
            first_answer=records[0].status,
        )


class FetchLagExperiment(FetchFaultExperiment):
    name = "fetch-lag"
    fault_name = "fetch-lag"
    what = "a 404 (the object not committed where the consumer reads yet)"
    description = (
        "The event arrives before the provider's own commit reached the replica the consumer reads: fetching "
        "the object it names (or the event) answers 404 resource_missing until its first attempt is answered."
    )

    def fault(self) -> ApiFault:
        return Lag()


class FetchStaleExperiment(FetchFaultExperiment):
    name = "fetch-stale"
    fault_name = "fetch-stale"
    what = "the version before the event (a lagging replica's)"
    description = (
        "Fetching the object the event names serves the version before the event (a payment intent still "
        "processing, a session still open) until its first attempt is answered."
    )

    def fault(self) -> ApiFault:
        return Stale()


class FetchThrottledExperiment(FetchFaultExperiment):
    name = "fetch-throttled"
    fault_name = "fetch-throttled"
    what = "a 429 rate_limit with Retry-After"
    description = (
        "Every call on the event's objects answers 429 rate_limit with Retry-After until its first attempt is "
        "answered."
    )

    def fault(self) -> ApiFault:
        return Throttle()
