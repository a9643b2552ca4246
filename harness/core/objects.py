"""Trials beyond one event: an object's events rendered, delivered in an order, and read after each.

What `out-of-order`, `sibling-events` and `race-with-request` (and the explorer's reorder,
sibling and competitor steps) share:

* **An object's events.** A try hands an experiment fresh events (their ids and order ids come
  from the plan). `lifecycle_events` makes one object's lifecycle of them: event k is the
  spec's ``event:`` with lifecycle event k's ``set:`` and type, its own id, the object's order
  id, and ``{{event_time}}`` increasing along the list (the newest is now; ``same-second``:
  every event the same second). `sibling_events` makes the event and its siblings, all of one
  change (one second). Each event is remembered by the trial with its object
  (``:object_id``, `TrialContext.remember`).
* **Reads after each delivery.** `read_after` records the object's count (and state, where
  probed) right after a delivery was answered (observation ``after-delivery``); the count
  is the object's (``:object_id``) when the probe reads one, else the sum of its events'.
* **The case.** `ObjectPlay.case` is what the trial record keeps of the object
  (`acklab.evidence.documents.objects.ObjectCase`): variant, events, arrival order.
* **Proofs.** `answered` (every delivery got an answer: the permutation really reached the
  handler), `together` (a burst's deliveries were at the handler before its first answer).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal

import httpx

from acklab.evidence.documents.objects import ObjectCase, ObjectEvent
from acklab.harness.core.bursts import Burst
from acklab.harness.core.proofs import Proof, landed, missed
from acklab.harness.core.trial import TrialContext
from acklab.harness.wire.records import DeliveryRecord
from acklab.harness.wire.templates import WebhookEvent, render

Counted = Literal["object", "events"]
AFTER_DELIVERY = "after-delivery"


@dataclass
class ObjectPlay:
    """One object in play in a try: its events in the provider's order, and what reached the handler."""

    experiment: str
    variant: str
    events: list[WebhookEvent]  # position k: the k-th the provider emits (the event, then its siblings)
    states: list[str | None] = field(default_factory=list)  # lifecycle: the state each leaves
    arrival: list[DeliveryRecord] = field(default_factory=list)
    competitor: bool = False

    @property
    def primary(self) -> WebhookEvent:
        return self.events[0]

    @property
    def object_id(self) -> str:
        return self.primary.object_id

    def case(self, counted: Counted) -> ObjectCase:
        """The trial record's ``objects`` entry for this object."""
        return ObjectCase(
            object_id=self.object_id,
            experiment=self.experiment,
            variant=self.variant,
            events=[
                ObjectEvent(
                    event_id=e.event_id,
                    type=e.type_header or e.event_type,
                    position=k,
                    event_time=e.event_time,
                    state=self.states[k] if k < len(self.states) else None,
                )
                for k, e in enumerate(self.events)
            ],
            arrival=[r.seq for r in self.arrival],
            counted=counted,
            competitor=True if self.competitor else None,
        )


def counted(trial: TrialContext) -> Counted:
    """How the target counts an object's effects: by ``:object_id``, or per event (then summed)."""
    return "object" if trial.lab.endpoint.probe.by_object else "events"


def _at(seconds: int) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


def lifecycle_events(
    trial: TrialContext, slot: Sequence[WebhookEvent], *, same_second: bool
) -> list[WebhookEvent]:
    """The target's lifecycle as one object, made of the fresh events `slot` (one per lifecycle event)."""
    target = trial.lab.target
    steps = target.objects.lifecycle
    newest = int(time.time())
    base = newest - (len(steps) - 1)
    made = []
    for k, (step, fresh) in enumerate(zip(steps, slot, strict=True)):
        seconds = base if same_second else base + k
        event = render(
            target.objects.template_of(target.template, step, f"lifecycle.events[{k}]"),
            event_id=fresh.event_id,
            order_id=slot[0].order_id,
            seq=fresh.seq,
            created=_at(seconds),
            object_template=target.objects.object,
        )
        made.append(trial.remember(dataclasses.replace(event, type_header=step.type)))
    for event in made:  # the provider emitted them in its order, whatever order they are delivered in
        trial.emit(event)
    return made


def sibling_events(trial: TrialContext, slot: Sequence[WebhookEvent]) -> list[WebhookEvent]:
    """The event and its siblings for one change (one second), made of the fresh events `slot`."""
    target = trial.lab.target
    seconds = int(time.time())
    first = slot[0]
    made = [
        trial.remember(
            render(
                target.template,
                event_id=first.event_id,
                order_id=first.order_id,
                seq=first.seq,
                created=_at(seconds),
                object_template=target.objects.object,
            )
        )
    ]
    for k, (sibling, fresh) in enumerate(zip(target.objects.siblings, slot[1:], strict=True)):
        event = render(
            target.objects.template_of(target.template, sibling, f"siblings[{k}]"),
            event_id=fresh.event_id,
            order_id=first.order_id,
            seq=fresh.seq,
            created=_at(seconds),
            object_template=target.objects.object,
        )
        made.append(trial.remember(dataclasses.replace(event, type_header=sibling.type)))
    return made


async def observe_before(trial: TrialContext, play: ObjectPlay, *, state: bool) -> None:
    """The object's effects (and state) before its first delivery: each event's, when counted per event."""
    for event in play.events if counted(trial) == "events" else play.events[:1]:
        await trial.observe(event, "before", state=state and event is play.primary)


async def read_after(trial: TrialContext, play: ObjectPlay, record: DeliveryRecord, *, state: bool) -> None:
    """The object's count (and state) right after `record` was answered (``after-delivery``)."""
    for event in play.events if counted(trial) == "events" else play.events[:1]:
        await trial.observe(
            event, AFTER_DELIVERY, state=state and event is play.primary, after_seq=record.seq
        )


def competitor_request(trial: TrialContext, event: WebhookEvent) -> tuple[httpx.Request, DeliveryRecord]:
    """The app's own request for `event`'s object (race-with-request), built and recorded, not sent."""
    competitor = trial.lab.target.objects.competitor
    if competitor is None:
        raise TypeError("competitor_request on a target without competitor:")
    origin = trial.lab.url.copy_with(path="/", query=None, fragment=None)
    url, body = competitor.request_for(event, base=str(origin))
    return trial.prepare_plain(
        event, method=competitor.method, url=url, body=body, headers=competitor.headers, kind="competitor"
    )


def answered(records: Sequence[DeliveryRecord], what: str) -> Proof | None:
    """A miss when one of `records` got no answer from the handler (None: every one was answered)."""
    silent = [r for r in records if r.status is None]
    if not silent:
        return None
    first = silent[0]
    return missed(
        f"{what}: delivery seq {first.seq} ({first.kind}) got no answer from the handler ({first.error}); "
        f"{len(silent)} of {len(records)} unanswered, so the order designed never reached it"
    )


def arrival_of(records: Sequence[DeliveryRecord]) -> list[DeliveryRecord]:
    """`records` in the order they reached the handler: as it reported entering (every one must
    say), else as their last bytes were written, else as sent."""
    if all(r.handler_entered_ns is not None for r in records):
        return sorted(records, key=lambda r: (r.handler_entered_ns or 0, r.seq))
    if all(r.written_mono is not None for r in records):
        return sorted(records, key=lambda r: (r.written_mono or 0.0, r.seq))
    return sorted(records, key=lambda r: r.seq)


def together(burst: Burst, what: str) -> Proof:
    """Whether the burst's deliveries were at the handler at once (the second written before the
    first answer), with the burst's measured spread."""
    records = burst.records
    facts = {"burst": len(records), **burst.facts()}
    if burst.closed_half_sent:
        return missed(
            f"{what}: the target closed {burst.closed_half_sent} of {len(records)} connections while their "
            "requests were half-sent: the burst is not the one designed",
            **facts,
        )
    silent = answered(records, what)
    if silent is not None:
        return missed(silent.evidence, **facts)
    written = sorted(m for r in records if (m := r.written_mono) is not None)
    answers = sorted(m for r in records if (m := r.answered_mono) is not None)
    at_once = sum(m < answers[0] for m in written) if answers else 0
    facts["at_handler_together"] = at_once
    if at_once < len(records):
        return missed(
            f"{what}: the handler answered the first request before the last was written ({burst.describe()}): "
            "they did not race",
            **facts,
        )
    return landed(
        f"{what}: all {len(records)} were at the handler before its first answer; {burst.describe()}", **facts
    )


def joined(proofs: Sequence[Proof]) -> Proof:
    """One proof of several parts: landed when every part landed."""
    facts = {k: v for p in proofs for k, v in p.facts.items()}
    text = "; ".join(p.evidence for p in proofs)
    return landed(text, **facts) if all(p.landed for p in proofs) else missed(text, **facts)
