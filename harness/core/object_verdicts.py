"""Verdicts beyond one event, from a trial's records alone (`harness.core.verdicts` calls `judge_objects`).

A trial of out-of-order, sibling-events or race-with-request records the objects it played
(``objects``: `acklab.evidence.documents.objects.ObjectCase`). For each:

* ``newest-state-wins`` (out-of-order): once settled — and again at the end of the run — the
  object's state is the state of the newest event (last in the provider's order), whatever
  order the events arrived in.
* ``state-never-regresses`` (out-of-order): read after every delivery, then settled and at
  the end of the run: once the state of event k was seen, no later read shows the state of an
  earlier event. Reads that match no event's state (nothing stored yet) are not positions.
* ``at-most-once-per-object`` (sibling-events, race-with-request): the object's effects —
  counted by ``:object_id``, or the sum of its events' counts — stay ≤ ``expect.max_effects``
  across the event, its siblings and the app's own request.
  With sinks (``effects.smtp``, ``effects.outbound``) the object's emails and downstream
  calls stay ≤ ``expect.max_emails`` and ``expect.max_calls`` too (``source``: ``emails``,
  ``calls``; the database's count is then ``rows``): a receipt sent by both sibling events,
  or by both the webhook and the browser's return, is two receipts however many orders the
  database kept.
* ``acked-exactly-once`` (sibling-events, race-with-request): an object whose event the
  handler acknowledged (or whose competitor was answered 2xx) has an effect: a handler that
  does nothing cannot pass.

Every violation names the delivery that caused it and the order the object's deliveries
arrived in. A state read as canonical JSON matches a lifecycle state when it is that value,
or one row of one column holding it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from acklab.evidence.documents.objects import ObjectCase
from acklab.evidence.documents.records import (
    Delivery,
    EffectSource,
    Observation,
    Violation,
    ViolationDelivery,
)
from acklab.evidence.documents.trial import Trial
from acklab.evidence.documents.verdicts import Invariant
from acklab.harness.sinks import SINKS
from acklab.harness.targets import Expect

STATE_EXPERIMENTS = frozenset({"out-of-order"})
AFTER_DELIVERY = "after-delivery"
SHOWN_STATE = 120


@dataclass
class ObjectJudgement:
    """What one object case showed: its violations, and the lab errors that prevent a verdict."""

    case: ObjectCase
    violations: list[Violation] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    @property
    def event_ids(self) -> set[str]:
        return {e.event_id for e in self.case.events}


def state_value(text: str | None) -> str | None:
    """A state read as the value it holds: one row of one column unwrapped; None when nothing is stored."""
    if text is None:
        return None
    try:
        value: Any = json.loads(text)
    except ValueError:
        return text
    while isinstance(value, list) and len(value) == 1:
        value = value[0]
    if value is None or value == []:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, bool | int | float):
        return str(value)
    return text


def _shown(text: str | None) -> str:
    if text is None:
        return "nothing"
    return text if len(text) <= SHOWN_STATE else text[:SHOWN_STATE] + "…"


class _Case:
    """One object case with its deliveries and observations, and how its violations are worded."""

    def __init__(self, trial: Trial, case: ObjectCase, expect: Expect) -> None:
        self.trial, self.case, self.expect = trial, case, expect
        self.result = ObjectJudgement(case)
        ids = {e.event_id for e in case.events}
        self.deliveries = {d.seq: d for d in trial.deliveries if d.event_id in ids}
        self.primary = case.events[0]

    def _named(self, delivery: Delivery) -> str:
        event = self.case.event(delivery.event_id)
        what = "the app's own request" if delivery.kind == "competitor" else (event.type if event else "?")
        return f"seq {delivery.seq} {what} ({delivery.kind}, answered {delivery.status})"

    def arrival(self) -> str:
        listed = [self._named(self.deliveries[s]) for s in self.case.arrival if s in self.deliveries]
        return f"{self.case.variant}: arrived " + (" → ".join(listed) if listed else "nothing")

    def violate(
        self,
        invariant: Invariant,
        event_id: str,
        observed: int | str | None,
        expected: str,
        detail: str,
        *,
        cause: Delivery | None,
        source: EffectSource | None = None,
    ) -> None:
        self.result.violations.append(
            Violation(
                invariant=invariant,
                event_id=event_id,
                observed=observed,
                expected=expected,
                detail=f"object {self.case.object_id} ({self.arrival()}): {detail}",
                trial=self.trial.trial_id,
                delivery=(
                    ViolationDelivery(seq=cause.seq, kind=cause.kind, attempt=cause.attempt)
                    if cause
                    else None
                ),
                source=source,
            )
        )

    def observations(self, note: str) -> list[Observation]:
        ids = {e.event_id for e in self.case.events}
        return [o for o in self.trial.observations if o.event_id in ids and o.note == note]

    def count(self, note: str) -> int | None:
        """The object's effects at `note`: its own count, or the sum of its events' (None: not read)."""
        if self.case.counted == "object":
            found = [o.effects for o in self.observations(note) if o.event_id == self.primary.event_id]
            found = found or [o.effects for o in self.observations(note)]
            return found[-1] if found else None
        last = {o.event_id: o.effects for o in self.observations(note)}
        if len(last) < len(self.case.events):
            return None
        return sum(last.values())

    def extra_cause(self, seen: Delivery | None) -> Delivery | None:
        """The delivery an effect beyond the limit came with: the first read after which it showed
        (`seen`), else — released together — the second delivery to arrive."""
        if seen is None and len(self.case.arrival) > 1:
            return self.deliveries.get(self.case.arrival[1])
        return seen

    def too_many(
        self,
        observed: int,
        limit: int,
        detail: str,
        *,
        cause: Delivery | None,
        extra: str,
        source: EffectSource | None,
    ) -> None:
        """at-most-once-per-object: `observed` effects of one source beyond `limit`, and what brought them."""
        self.violate(
            "at-most-once-per-object",
            cause.event_id if cause is not None else self.primary.event_id,
            observed,
            f"<= {limit}",
            detail + (f"; the extra {extra} came with {self._named(cause)}" if cause is not None else ""),
            cause=cause,
            source=source,
        )

    def sinks_seen(self) -> bool:
        return any(o.sinks_seen for o in self.observations("final"))

    def reads_after(self) -> list[tuple[Delivery, int | None, str | None]]:
        """(delivery, count, state) read right after each delivery, in arrival order."""
        found: list[tuple[Delivery, int | None, str | None]] = []
        reads = self.observations(AFTER_DELIVERY)
        for seq in self.case.arrival:
            delivery = self.deliveries.get(seq)
            here = [o for o in reads if o.after_seq == seq]
            if delivery is None or not here:
                continue
            mine = [o for o in here if o.event_id == self.primary.event_id] or here
            if self.case.counted == "object":
                effects: int | None = mine[-1].effects
            else:
                by_event = {o.event_id: o.effects for o in here}
                effects = sum(by_event.values()) if len(by_event) == len(self.case.events) else None
            found.append((delivery, effects, mine[-1].state))
        return found

    def fresh(self) -> bool:
        before = self.observations("before")
        if not before:
            self.result.errors.append(f"object {self.case.object_id}: no 'before' observation was recorded")
            return False
        if any(o.effects for o in before):
            self.result.errors.append(
                f"object {self.case.object_id}: already had effects before the trial; the object id was used "
                "before against this database (reused --seed?); run with another seed"
            )
            return False
        if not self.deliveries:
            self.result.errors.append(f"object {self.case.object_id}: no delivery was recorded")
            return False
        return True


def _judge_states(c: _Case) -> None:
    """newest-state-wins and state-never-regresses."""
    positions = {e.state: e.position for e in c.case.events if e.state is not None}
    newest = c.case.newest
    types = {e.position: e.type for e in c.case.events}
    finals = [o for o in c.observations("final") if o.event_id == c.primary.event_id]
    if not finals:
        c.result.errors.append(f"object {c.case.object_id}: no settled ('final') state was recorded")
        return
    reads = c.reads_after()
    late = [o for o in c.observations("late") if o.event_id == c.primary.event_id]
    # newest-state-wins: once settled, and by the end of the run
    for seen, when in ((finals[-1], "once settled"), *((o, "at the end of the run") for o in late[-1:])):
        value = state_value(seen.state)
        if value != newest.state:
            cause = _last_change(reads)
            c.violate(
                "newest-state-wins",
                newest.event_id,
                _shown(value) if value is not None else _shown(seen.state),
                f"== {newest.state!r}",
                f"{when} the object's state is {_shown(value)!s}, not {newest.state!r}, the state of the newest "
                f"event ({newest.type}, {newest.event_id}; event time {newest.event_time})"
                + (f"; it was last set by {c._named(cause)}" if cause is not None else ""),
                cause=cause,
            )
            break
    # state-never-regresses: after every delivery, then settled and late
    sequence: list[tuple[Delivery | None, str | None, str]] = [
        (delivery, state, f"after {c._named(delivery)}") for delivery, _, state in reads
    ]
    sequence += [(None, finals[-1].state, "once settled")] + [
        (None, o.state, "at the end of the run") for o in late[-1:]
    ]
    high: int | None = None
    cause_of_high: str = ""
    for delivery, state, when in sequence:
        position = positions.get(state_value(state) or "")
        if position is None:
            continue
        if high is not None and position < high:
            c.violate(
                "state-never-regresses",
                delivery.event_id if delivery is not None else c.case.events[position].event_id,
                _shown(state_value(state)),
                f"a state no older than {c.case.events[high].state!r}",
                f"{when} the state went back to {c.case.events[position].state!r} (the state of {types[position]}) "
                f"after {c.case.events[high].state!r} (the state of {types[high]}) was seen {cause_of_high}",
                cause=delivery,
            )
            return
        if high is None or position > high:
            high, cause_of_high = position, when


def _last_change(reads: Sequence[tuple[Delivery, int | None, str | None]]) -> Delivery | None:
    """The delivery after which the state last changed (what the settled state came from)."""
    cause, previous = None, None
    for delivery, _, state in reads:
        if state != previous:
            cause, previous = delivery, state
    return cause


def _grew(settled: int, late: int | None) -> str:
    return (
        f" (read {settled} when settled, {late} at the end of the run)"
        if late is not None and late > settled
        else ""
    )


def _judge_counts(c: _Case) -> None:
    """at-most-once-per-object and acked-exactly-once, for an object's events and its competitor."""
    final, late = c.count("final"), c.count("late")
    if final is None:
        c.result.errors.append(f"object {c.case.object_id}: no settled ('final') count was recorded")
        return
    last = final if late is None else max(final, late)
    reads = c.reads_after()
    if last > c.expect.max_effects:
        cause = c.extra_cause(
            next((d for d, n, _ in reads if n is not None and n > c.expect.max_effects), None)
        )
        c.too_many(
            last,
            c.expect.max_effects,
            f"{len(c.deliveries)} deliveries to one object left {last} side effects{_grew(final, late)}",
            cause=cause,
            extra="effect",
            # beside the sinks' emails and calls, the database's count is the source "rows"
            source="rows" if c.sinks_seen() else None,
        )
    acked = [d for d in c.deliveries.values() if d.acknowledged]
    if acked and final == 0 and not late:
        first = acked[0]
        c.violate(
            "acked-exactly-once",
            first.event_id,
            0,
            "== 1",
            f"the handler answered {first.status} to {c._named(first)} but the object has no side effect",
            cause=first,
        )


def _sent(observations: Sequence[Observation], name: str) -> int | None:
    """The most emails (or calls) any of the object's events counted: the object's, never more.

    The sinks count a message for every event it names, and an object's events share its order
    (`{{order_id}}`, `{{object_id}}`): one receipt counts once for each sibling, so the object's
    count is the largest of its events', not their sum (a message naming only its own
    `{{event_id}}` is then not added up across siblings: a miss, never a false alarm)."""
    found = [n for o in observations if (n := o.count_of(name)) is not None]
    return max(found) if found else None


def _judge_sinks(c: _Case) -> None:
    """at-most-once-per-object for the emails and the downstream calls the object's deliveries (and
    the app's own request, through the order they share) sent; nothing without sinks."""
    if not c.sinks_seen():
        return
    final, late = c.observations("final"), c.observations("late")
    reads = c.observations(AFTER_DELIVERY)
    for kind in SINKS.values():
        name, limit = kind.source, c.expect.max_of(kind.source)
        settled, later = _sent(final, name), _sent(late, name)
        if settled is None:
            continue
        last = settled if later is None else max(settled, later)
        if last <= limit:
            continue
        over = next((o.after_seq for o in reads if (o.count_of(name) or 0) > limit), None)
        cause = c.extra_cause(c.deliveries.get(over) if over is not None else None)
        c.too_many(
            last,
            limit,
            f"{name}: {len(c.deliveries)} deliveries to one object sent {last} {kind.what}{_grew(settled, later)}",
            cause=cause,
            extra="one",
            source=name,
        )


def judge_objects(trial: Trial, expect: Expect) -> list[ObjectJudgement]:
    """Each object case of `trial`, judged from its records."""
    found = []
    for case in trial.objects or ():
        c = _Case(trial, case, expect)
        if c.fresh():
            if case.experiment in STATE_EXPERIMENTS:
                _judge_states(c)
            else:
                _judge_counts(c)
                _judge_sinks(c)
        found.append(c.result)
    return found
