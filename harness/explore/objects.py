"""The explorer's steps beyond one event: reorder, sibling and competitor (`harness.explore.schedules`).

* ``reorder(k, n)`` delivers lifecycle event ``n`` of an object of its own for event index
  ``k`` (its events made as out-of-order makes them: `harness.core.objects.lifecycle_events`);
  the order of the steps is the order they arrive in, so Hypothesis finds — and shrinks — the
  permutation that breaks the handler. After each one the object's state must be the state of
  the newest event acknowledged so far (``newest-state-wins``) and never an older one than a
  state already read (``state-never-regresses``).
* ``sibling(k, n)`` delivers sibling ``n`` of event ``k`` (same order, a fresh event id);
  ``competitor(k)`` sends the app's own request for event ``k``'s order. After each, and after
  every later step on event ``k``, its object's effects must stay within ``max_effects``
  (``at-most-once-per-object``): counted by ``:object_id``, or summed over the event and the
  siblings sent.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from acklab.evidence.documents.records import Violation
from acklab.evidence.documents.verdicts import Invariant
from acklab.harness.core.object_verdicts import state_value
from acklab.harness.core.objects import competitor_request, lifecycle_events, sibling_events
from acklab.harness.core.trial import TrialContext
from acklab.harness.errors import HarnessError, SpecError
from acklab.harness.targets import Expect
from acklab.harness.wire.records import DeliveryRecord
from acklab.harness.wire.templates import WebhookEvent

if TYPE_CHECKING:
    from acklab.harness.explore.schedules import EventModel, Step


@dataclass
class Lifecycle:
    """One object's lifecycle in a schedule: its events, which were acknowledged, the newest state read."""

    events: list[WebhookEvent]
    states: list[str]
    sent: dict[int, int] = field(default_factory=dict)  # position -> deliveries so far
    acked: set[int] = field(default_factory=set)
    high: int | None = None  # the newest position whose state was read


@dataclass
class Shared:
    """Event k's object once siblings or the app's own request touched it."""

    event: WebhookEvent
    siblings: dict[int, WebhookEvent] = field(default_factory=dict)  # sibling number -> event
    sent: set[int] = field(default_factory=set)  # siblings delivered


class ObjectSteps:
    """Runs the object steps of one schedule and checks the invariants after each."""

    def __init__(self, trial: TrialContext, expect: Expect, models: dict[int, EventModel]) -> None:
        self.trial, self.expect, self.models = trial, expect, models
        self.lifecycles: dict[int, Lifecycle] = {}
        self.shared: dict[int, Shared] = {}

    def shares(self, k: int) -> bool:
        """Whether event k's count is its object's, shared with siblings or the app's own request."""
        return k in self.shared

    async def run(self, index: int, step: Step) -> list[Violation]:
        objects = self.trial.lab.target.objects
        if step.op == "reorder":
            if len(objects.lifecycle) < 2:
                raise SpecError(
                    f"schedule step {index} ({step}): the target has no lifecycle: events to reorder"
                )
            return await self._reorder(index, step)
        if step.op == "sibling" and not objects.siblings:
            raise SpecError(f"schedule step {index} ({step}): the target has no siblings: section")
        if step.op == "competitor" and objects.competitor is None:
            raise SpecError(f"schedule step {index} ({step}): the target has no competitor: section")
        return await self._shared_step(index, step)

    async def _quiet(self, index: int, step: Step) -> None:
        if not await self.trial.lab.transport.quiesce(self.trial.lab.horizon_s):
            raise HarnessError(f"step {index} ({step}): the handler never answered within the lab's horizon")

    def _violation(
        self, index: int, step: Step, invariant: Invariant, event_id: str, **what: Any
    ) -> Violation:
        """A violation of `invariant` after step `index`: ``observed``, ``expected`` and ``detail`` in `what`."""
        return Violation(
            invariant=invariant,
            event_id=event_id,
            observed=what["observed"],
            expected=what["expected"],
            detail=f"after step {index} ({step}): {what['detail']}",
            trial=self.trial.plan.trial_id,
        )

    # -- reorder ---------------------------------------------------------------------------------

    async def _lifecycle(self, k: int) -> Lifecycle:
        if k not in self.lifecycles:
            base = self.trial.event(k)
            steps = self.trial.lab.target.objects.lifecycle
            # An object of its own: the event's other steps never touch this lifecycle's state.
            slot = [
                dataclasses.replace(base, event_id=f"{base.event_id}-lc{p}", order_id=f"{base.order_id}lc")
                for p in range(len(steps))
            ]
            made = Lifecycle(lifecycle_events(self.trial, slot, same_second=False), [s.state for s in steps])
            before = await self.trial.observe(made.events[0], "before", state=True)
            if before.effects or state_value(before.state) is not None:
                raise HarnessError(
                    f"{made.events[0].object_id} existed before its first delivery; reused ids"
                )
            self.lifecycles[k] = made
        return self.lifecycles[k]

    async def _reorder(self, index: int, step: Step) -> list[Violation]:
        model = await self._lifecycle(step.event)
        position = min(step.n, len(model.events)) - 1
        attempt = model.sent.get(position, 0) + 1
        model.sent[position] = attempt
        event = model.events[position]
        record = await self.trial.send(event, kind="original" if attempt == 1 else "retry", attempt=attempt)
        await self._quiet(index, step)
        read = await self.trial.observe(model.events[0], f"after-step-{index}", state=True)
        if record.acknowledged:
            model.acked.add(position)
        value = state_value(read.state)
        found: list[Violation] = []
        where = model.states.index(value) if value in model.states else None
        if where is not None and model.high is not None and where < model.high:
            found.append(
                self._violation(
                    index,
                    step,
                    "state-never-regresses",
                    event.event_id,
                    observed=value,
                    expected=f"a state no older than {model.states[model.high]!r}",
                    detail=f"object {event.object_id} went back to {value!r} after {model.states[model.high]!r} was read "
                    f"(statuses of this step: {[record.status]})",
                )
            )
        if where is not None and (model.high is None or where > model.high):
            model.high = where
        if model.acked:
            newest = max(model.acked)
            if value != model.states[newest]:
                found.append(
                    self._violation(
                        index,
                        step,
                        "newest-state-wins",
                        event.event_id,
                        observed=value,
                        expected=f"== {model.states[newest]!r}",
                        detail=f"object {event.object_id} is in {value!r}; the newest event acknowledged so far is "
                        f"lifecycle event {newest + 1} ({model.events[newest].type_header}), which leaves "
                        f"{model.states[newest]!r}",
                    )
                )
        return found

    # -- siblings and the competitor -------------------------------------------------------------

    def _share(self, k: int) -> Shared:
        if k not in self.shared:
            self.shared[k] = Shared(self.trial.event(k))
        return self.shared[k]

    async def _shared_step(self, index: int, step: Step) -> list[Violation]:
        shared = self._share(step.event)
        if step.op == "sibling":
            siblings = self.trial.lab.target.objects.siblings
            number = min(step.n, len(siblings))
            if not shared.siblings:
                base = shared.event
                slot = [base] + [
                    dataclasses.replace(base, event_id=f"{base.event_id}-sib{j}")
                    for j in range(1, len(siblings) + 1)
                ]
                made = sibling_events(self.trial, slot)
                self.trial.remember(base)  # sibling_events re-rendered the event's id: keep the original
                shared.siblings = dict(enumerate(made[1:], start=1))
            sent = [await self.trial.send(shared.siblings[number], kind="original")]
            shared.sent.add(number)
        else:
            if not self.trial.lab.endpoint.probe.by_object:
                raise SpecError(
                    f"schedule step {index} ({step}): the app's own request leaves an effect without an event id; "
                    "count by :object_id"
                )
            request, record = competitor_request(self.trial, shared.event)
            sent = [await self.trial.transmit(request, record)]
        await self._quiet(index, step)
        effects = await self.count(index, step.event)
        if step.event in self.models:  # the event's own steps compare the count with this one next
            self.models[step.event].effects = effects
        return self._over(index, step, sent, effects)

    async def count(self, index: int, k: int) -> int:
        """Event k's object's effects now: its own count, or the event's and its siblings' summed."""
        shared = self.shared[k]
        read = await self.trial.observe(shared.event, f"after-step-{index}")
        if self.trial.lab.endpoint.probe.by_object:
            return read.effects
        total = read.effects
        for number in sorted(shared.sent):
            total += (await self.trial.observe(shared.siblings[number], f"after-step-{index}")).effects
        return total

    def _over(self, index: int, step: Step, records: list[DeliveryRecord], effects: int) -> list[Violation]:
        """at-most-once-per-object after a sibling or competitor step on event k's object."""
        if effects <= self.expect.max_effects:
            return []
        shared = self.shared[step.event]
        return [
            self._violation(
                index,
                step,
                "at-most-once-per-object",
                records[-1].event_id if records else shared.event.event_id,
                observed=effects,
                expected=f"<= {self.expect.max_effects}",
                detail=f"object {shared.event.object_id} (event {step.event}, {len(shared.sent)} sibling(s) sent) has "
                f"{effects} side effects (statuses of this step: {[r.status for r in records]})",
            )
        ]
