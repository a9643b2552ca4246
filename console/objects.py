"""Objects beyond one event: a lifecycle's arrival order and the state read after each delivery.

A trial of out-of-order, sibling-events or race-with-request records the objects it played
(``objects``) beside its deliveries and observations. Here each becomes an `ObjectView`:
its deliveries in the order they reached the handler, each with the event (its type and its
place in the provider's order), the handler's answer and the state and effects the lab read
right after it; then the settled state. A row is marked where a recorded violation of the
object names that delivery — the console never decides a violation of its own.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from acklab.evidence.documents.objects import ObjectCase
from acklab.evidence.documents.records import Delivery, Observation, Violation
from acklab.evidence.documents.trial import Trial

AFTER_DELIVERY = "after-delivery"
STATE_SHOWN = 80


def shown_state(text: str | None) -> str | None:
    """A recorded state as people read it: one row of one column unwrapped, bounded."""
    if text is None:
        return None
    value: Any
    try:
        value = json.loads(text)
    except ValueError:
        value = text
    while isinstance(value, list) and len(value) == 1:
        value = value[0]
    if value is None or value == []:
        return "—"
    shown = value if isinstance(value, str) else json.dumps(value)
    return shown if len(shown) <= STATE_SHOWN else shown[:STATE_SHOWN] + "…"


@dataclass(frozen=True)
class ObjectStep:
    """One delivery to the object, in arrival order, and what the lab read right after it."""

    arrived: int  # 1-based: the order it reached the handler
    seq: int
    event_id: str
    event_type: str  # the event's type, or "the app's own request"
    position: int | None  # its place in the provider's order (None: the competitor)
    of: int
    kind: str
    status: int | None
    state_after: str | None
    effects_after: int | None
    violated: tuple[str, ...]  # the invariants a recorded violation names this delivery for

    @property
    def competitor(self) -> bool:
        return self.kind == "competitor"


@dataclass(frozen=True)
class ObjectView:
    """One object of a trial: the variant, its steps, the newest state and the settled one."""

    object_id: str
    experiment: str
    variant: str
    steps: list[ObjectStep]
    newest_state: str | None
    settled_state: str | None
    settled_effects: int | None
    violations: list[Violation]

    @property
    def failed(self) -> bool:
        return bool(self.violations)


def _reads(observations: list[Observation], ids: set[str], primary: str) -> dict[int, Observation]:
    found: dict[int, Observation] = {}
    for o in observations:
        mine = o.note == AFTER_DELIVERY and o.event_id in ids and o.after_seq is not None
        if mine and o.after_seq is not None and (o.event_id == primary or o.after_seq not in found):
            found[o.after_seq] = o
    return found


def _view(trial: Trial, case: ObjectCase) -> ObjectView:
    ids = {e.event_id for e in case.events}
    primary = case.events[0].event_id
    deliveries: dict[int, Delivery] = {d.seq: d for d in trial.deliveries if d.event_id in ids}
    reads = _reads(list(trial.observations), ids, primary)
    mine = [v for v in trial.violations if f"object {case.object_id} " in v.detail]
    blamed: dict[int, list[str]] = {}
    for v in mine:
        if v.delivery is not None:
            blamed.setdefault(v.delivery.seq, []).append(v.invariant)
    steps = []
    for n, seq in enumerate(case.arrival, start=1):
        d = deliveries.get(seq)
        if d is None:
            continue
        event = case.event(d.event_id)
        read = reads.get(seq)
        steps.append(
            ObjectStep(
                arrived=n,
                seq=seq,
                event_id=d.event_id,
                event_type="the app's own request"
                if d.kind == "competitor"
                else (event.type if event else "?"),
                position=None if d.kind == "competitor" or event is None else event.position,
                of=len(case.events),
                kind=d.kind,
                status=d.status,
                state_after=shown_state(read.state) if read is not None else None,
                effects_after=read.effects if read is not None else None,
                violated=tuple(blamed.get(seq, ())),
            )
        )
    settled = [o for o in trial.observations if o.note == "final" and o.event_id == primary]
    return ObjectView(
        object_id=case.object_id,
        experiment=case.experiment,
        variant=case.variant,
        steps=steps,
        newest_state=case.newest.state,
        settled_state=shown_state(settled[-1].state) if settled else None,
        settled_effects=settled[-1].effects if settled else None,
        violations=mine,
    )


def object_views(trial: Trial) -> list[ObjectView]:
    """Every object the trial played, in the order it played them."""
    return [_view(trial, case) for case in trial.objects or ()]


def object_steps(trial: Trial, object_id: str) -> list[ObjectStep]:
    """The steps of one object of `trial` (empty when it played no such object)."""
    return next((v.steps for v in object_views(trial) if v.object_id == object_id), [])
