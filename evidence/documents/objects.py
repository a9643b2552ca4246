"""What a trial records of the objects it played beyond one event (a trial record's ``objects``).

An out-of-order, sibling-events or race-with-request trial plays one object per variant: a
lifecycle delivered reversed, an event and its siblings in one burst, the webhook and the
app's own request released together. Each `ObjectCase` names the object, the variant, the
events it consists of (their place in the provider's order and, for a lifecycle, the state
each leaves) and the order the deliveries reached the handler; the deliveries and the state
read after each of them are the trial's ``deliveries`` and ``observations`` (note
``after-delivery``, with ``object_id``). Verdicts (`harness.core.object_verdicts`) and the
console read them from here. Each mirrors a ``$defs`` object of ``common.schema.json``.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from .base import Document, Omit

Position = Annotated[int, Field(ge=0)]


class ObjectEvent(Document):
    """One event of an object: its id and type, its place in the provider's order, its time."""

    SCHEMA = "common#/$defs/object_case/properties/events/items"

    event_id: str
    type: str
    position: Position  # lifecycle: index in the emission order; siblings: 0 the event, 1.. its siblings
    event_time: int  # the {{event_time}} it carried (Unix seconds)
    state: Omit[Annotated[str, Field(max_length=500)]] = None  # lifecycle: the state it leaves


class ObjectCase(Document):
    """One object a trial played: the variant, its events, and the order its deliveries arrived."""

    SCHEMA = "common#/$defs/object_case"

    object_id: str
    experiment: str
    variant: str
    events: list[ObjectEvent]
    # Delivery seqs in the order they reached the handler (a burst: as the handler reported
    # entering, else as released); what every violation of the object names.
    arrival: list[Position]
    # How the object's effects are counted: by :object_id ("object"), or as the sum of its
    # events' counts ("events": the count query reads :event_id only).
    counted: Literal["object", "events"]
    competitor: Omit[bool] = None  # the app's own request is part of this case

    @property
    def newest(self) -> ObjectEvent:
        """The event last in the provider's order (whose state must win)."""
        return max(self.events, key=lambda e: e.position)

    def event(self, event_id: str) -> ObjectEvent | None:
        return next((e for e in self.events if e.event_id == event_id), None)
