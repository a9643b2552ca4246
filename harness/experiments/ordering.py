"""``out-of-order``: one object's lifecycle events delivered in an order the provider does not promise.

Providers say events may arrive in any order (Stripe, Shopify, GitHub): a late
``customer.subscription.created`` overwrites the ``active`` an earlier-arriving ``updated``
wrote (Laravel Cashier #1201, the pay gem #282, Ghost Members #240); a watermark compared with
``>=`` lets a stale event of the same second win (Stripe's ``created`` has one-second
resolution). Each try plays every variant on an object of its own:

* ``reversed``: newest first, oldest last;
* ``newest-first``: the newest, then the rest in the provider's order;
* ``stale-redelivery``: in order, then the oldest redelivered after the newest (a provider retry);
* ``same-second``: reversed, every event carrying the same creation second.

Each delivery goes out as the provider sends it (signed, retried until acknowledged), the
object's state is read after each answer, and once the handler is quiet it is settled. The
fault landed when every delivery of every permutation was answered. Invariants
(`harness.core.object_verdicts`): ``newest-state-wins``, ``state-never-regresses``.
"""

from __future__ import annotations

import asyncio
from typing import ClassVar

from acklab.harness.core.objects import (
    ObjectPlay,
    answered,
    counted,
    lifecycle_events,
    observe_before,
    read_after,
)
from acklab.harness.core.plan import PlannedDelivery, RunSettings
from acklab.harness.core.proofs import Proof, landed
from acklab.harness.core.trial import TrialContext
from acklab.harness.experiments.base import Experiment
from acklab.harness.targets import Target
from acklab.harness.wire.providers import ProviderProfile
from acklab.harness.wire.templates import WebhookEvent

VARIANTS = ("reversed", "newest-first", "stale-redelivery", "same-second")


def permutation(variant: str, n: int) -> list[int]:
    """The positions (in the provider's order) in the order `variant` delivers them."""
    if variant in ("reversed", "same-second"):
        return list(range(n - 1, -1, -1))
    if variant == "newest-first":
        return [n - 1, *range(n - 1)]
    if variant == "stale-redelivery":
        return [*range(n), 0]
    raise ValueError(f"unknown out-of-order variant {variant!r}")


def lifecycle_missing(target: Target) -> str | None:
    """Why `target` has no lifecycle to play (None: it has one)."""
    if target.objects.lifecycle:
        return None
    return (
        "the target has no lifecycle: events (one object's events in the provider's order, each with the "
        "state it leaves); add them to deliver them out of order"
    )


class OutOfOrderExperiment(Experiment):
    name = "out-of-order"
    description = (
        "One object's lifecycle events (lifecycle:) delivered reversed, newest first, in order with a stale "
        "redelivery after the newest, and reversed within one second; the object's state is read after every "
        "delivery. Once settled it must be the newest event's, and it may never go back to an older one."
    )
    invariants: ClassVar[tuple[str, ...]] = ("newest-state-wins", "state-never-regresses")
    fault_name = "out-of-order"
    judges_totals = True
    proves = (
        "once an object's events were delivered in these orders, its state is the newest event's and never "
        "went back to an older one's"
    )

    def applicable(self, target: Target) -> str | None:
        missing = lifecycle_missing(target)
        if missing is not None:
            return missing
        if target.objects.order == "arrival":
            return (
                "expect.order: arrival says this consumer applies a lifecycle's events in the order they arrive, "
                "on purpose; there is no newest state to hold it to"
            )
        state = target.object_reads().state
        if state is None:
            return (
                "out-of-order reads the object's state after every delivery, and the target has no state probe: "
                "add effects.sql.state (with :object_id) or effects.http.state_path"
            )
        if not state:
            return (
                "the state probe reads :event_id only, but a lifecycle's events share one object: read its state "
                "by :object_id (e.g. SELECT status FROM subscriptions WHERE stripe_id = :object_id)"
            )
        return None

    def per_try(self, target: Target) -> int:
        return len(VARIANTS) * max(1, len(target.objects.lifecycle))

    def planned(
        self, target: Target, profile: ProviderProfile, settings: RunSettings
    ) -> tuple[PlannedDelivery, ...]:
        n = max(1, len(target.objects.lifecycle))
        planned = []
        for v, variant in enumerate(VARIANTS):
            seen: set[int] = set()
            for step, position in enumerate(permutation(variant, n)):
                planned.append(
                    PlannedDelivery(
                        event=v * n + position,
                        kind="retry" if position in seen else "original",
                        attempt=1,
                        fault="none",
                        at_ms=0.0,
                        when=f"{variant}, #{step + 1} (lifecycle event {position + 1} of {n}), until acknowledged",
                    )
                )
                seen.add(position)
        return tuple(planned)

    async def attempt(self, trial: TrialContext, events: list[WebhookEvent]) -> Proof:
        steps = trial.lab.target.objects.lifecycle
        n = len(steps)
        probed = trial.lab.endpoint.state is not None
        plays = [
            ObjectPlay(
                self.name,
                variant,
                lifecycle_events(trial, events[v * n : (v + 1) * n], same_second=variant == "same-second"),
                states=[s.state for s in steps],
            )
            for v, variant in enumerate(VARIANTS)
        ]
        for play in plays:
            await observe_before(trial, play, state=probed)

        async def play_out(play: ObjectPlay) -> None:
            """One object's permutation: each delivery retried until acknowledged, the state read after it."""
            delivered: set[int] = set()
            for position in permutation(play.variant, n):
                records = await trial.deliver(
                    play.events[position], kind="retry" if position in delivered else "original"
                )
                delivered.add(position)
                play.arrival += records
                await read_after(trial, play, records[-1], state=probed)

        # The objects are independent (as a provider's deliveries of several objects are): played at
        # once, each in its own order; then one settle for all of them.
        await asyncio.gather(*(play_out(play) for play in plays))
        settled = (
            [p.primary for p in plays] if counted(trial) == "object" else [e for p in plays for e in p.events]
        )
        for play in plays:
            trial.expect_total(play.events)
        await trial.settle(settled)
        trial.objects += [play.case(counted(trial)) for play in plays]
        sent = [r for play in plays for r in play.arrival]
        orders = {play.variant: permutation(play.variant, n) for play in plays}
        silent = answered(sent, "out-of-order")
        if silent is not None:
            return silent
        shown = "; ".join(f"{v} {[p + 1 for p in order]}" for v, order in orders.items())
        return landed(
            f"every delivery of every permutation was answered ({len(sent)} deliveries; lifecycle positions in "
            f"arrival order: {shown})",
            deliveries=len(sent),
            **{f"order_{v.replace('-', '_')}": " ".join(str(p + 1) for p in o) for v, o in orders.items()},
        )
