"""What a target spec says beyond one event: an object's lifecycle, sibling events, the app's own request.

DESIGN.md, "Beyond one event"::

    lifecycle:                    # one object's events, in the order the provider emits them
      object: "{{order_id}}"      # the id they share; count and state queries get :object_id
      events:
        - {type: customer.subscription.created, set: {data.object.status: incomplete}, state: incomplete}
        - {type: customer.subscription.updated, set: {data.object.status: active}, state: active}
    siblings: [{type: invoice.payment_succeeded}]   # other events for the same change as `event`
    competitor: {method: POST, url: "http://127.0.0.1:{{port}}/checkout/{{order_id}}/complete",
                 body: {order_id: "{{order_id}}"}, ok_status: [200, 201, 303, 409]}
    expect: {order: newest-wins}  # or arrival: out-of-order is then skipped, with that reason

`ObjectEvents.from_spec` reads them from the `TargetSpec`; `check_objects` refuses what a
schema cannot say (a ``set:`` path that does not resolve, two lifecycle events leaving the
same state, an object id the lab cannot make fresh). A spec without them stays what it was:
every event is its own object (``{{order_id}}``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from typing import Any

from acklab.harness.errors import SpecError
from acklab.harness.specs.target import DEFAULT_OBJECT, DEFAULT_OK_STATUS, Lifecycle, TargetSpec
from acklab.harness.wire.templates import PLACEHOLDER, WebhookEvent, render, with_set

ORDERS = ("newest-wins", "arrival")
# What may appear in a competitor's URL and body: the object's ids, filled per object.
COMPETITOR_PLACEHOLDERS = frozenset({"order_id", "object_id", "event_id"})
SAMPLE_TIME = datetime(2024, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class ObjectReads:
    """Whether a target's probes read an event's object (``:object_id``): its count, and its state
    (None: no state probe)."""

    count: bool = False
    state: bool | None = None


@dataclass(frozen=True)
class LifecycleEvent:
    """One event of the lifecycle: its provider type, how its body differs, the state it leaves."""

    type: str
    state: str
    set: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class SiblingEvent:
    """Another event the provider emits for the same change as the spec's ``event``."""

    type: str
    set: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Competitor:
    """The app's own request that can produce the same effect as the webhook (a browser return).

    `url` is a template (``{{order_id}}``, ``{{object_id}}``, ``{{event_id}}``); for an app served
    in the lab's process it may be a path of the app itself. An answer outside `ok_status` means
    the request did not reach the code path it competes on: the try's fault did not land.
    """

    method: str
    url: str
    body: Any = None
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)
    ok_status: tuple[int, ...] = DEFAULT_OK_STATUS

    def request_for(self, event: WebhookEvent, *, base: str | None = None) -> tuple[str, bytes | None]:
        """The URL and body of the competitor for `event`'s object (a path is joined to `base`)."""
        values = {"order_id": event.order_id, "object_id": event.object_id, "event_id": event.event_id}
        url = _fill_text(self.url, values)
        if url.startswith("/") and base is not None:
            url = base.rstrip("/") + url
        if self.body is None:
            return url, None
        return url, json.dumps(_fill_any(self.body, values), separators=(",", ":")).encode()


def _fill_text(text: str, values: Mapping[str, str]) -> str:
    return PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group(0)), text)


def _fill_any(value: Any, values: Mapping[str, str]) -> Any:
    if isinstance(value, dict):
        return {k: _fill_any(v, values) for k, v in value.items()}
    if isinstance(value, list):
        return [_fill_any(v, values) for v in value]
    if isinstance(value, str):
        return _fill_text(value, values)
    return value


@dataclass(frozen=True)
class ObjectEvents:
    """A target's ``lifecycle:``, ``siblings:``, ``competitor:`` and ``expect.order`` (all optional)."""

    object: str = DEFAULT_OBJECT
    lifecycle: tuple[LifecycleEvent, ...] = ()
    siblings: tuple[SiblingEvent, ...] = ()
    competitor: Competitor | None = None
    order: str = "newest-wins"

    @classmethod
    def from_spec(
        cls, spec: TargetSpec, *, competitor_headers: Mapping[str, str] | None = None
    ) -> ObjectEvents:
        """The sections of a target spec; absent ones stay empty.

        `competitor_headers`: the competitor's ``headers:`` with ``env:`` values read (secrets)."""
        lifecycle = spec.lifecycle or Lifecycle()
        raw = spec.competitor
        competitor = None
        if raw is not None:
            competitor = Competitor(
                method=raw.method,
                url=raw.url,
                body=raw.body,
                headers=dict(competitor_headers or {}),
                ok_status=raw.ok_status,
            )
        return cls(
            object=lifecycle.object,
            lifecycle=tuple(LifecycleEvent(e.type, str(e.state), dict(e.set)) for e in lifecycle.events),
            siblings=tuple(SiblingEvent(e.type, dict(e.set)) for e in spec.siblings),
            competitor=competitor,
            order=spec.expect.order,
        )

    def template_of(
        self, base: Mapping[str, Any], step: LifecycleEvent | SiblingEvent, where: str
    ) -> dict[str, Any]:
        """The body template of one lifecycle or sibling event: `base` with its ``set:`` and type."""
        return with_set(base, step.set, event_type=step.type, field=f"{where}.set")

    def describe(self) -> dict[str, Any]:
        """What an incident's parameters say of these sections (no header value: they are secrets)."""
        found: dict[str, Any] = {}
        if self.lifecycle:
            found["lifecycle"] = {
                "object": self.object,
                "events": [{"type": e.type, "state": e.state} for e in self.lifecycle],
                "order": self.order,
            }
        if self.siblings:
            found["siblings"] = [s.type for s in self.siblings]
        if self.competitor is not None:
            found["competitor"] = {"method": self.competitor.method, "url": self.competitor.url}
        return found


def check_objects(spec: TargetSpec, *, source: str) -> None:
    """Refuse (exit 3) what the schema cannot: ``set:`` paths that do not resolve in the event, two
    lifecycle events that leave the same state, an object id without ``{{order_id}}``, unknown
    placeholders in the competitor."""
    objects = ObjectEvents.from_spec(spec)
    if spec.lifecycle is not None:
        if "{{order_id}}" not in objects.object.replace(" ", ""):
            raise SpecError(
                f"{source}: lifecycle.object: got {objects.object!r}; it must contain {{{{order_id}}}} (the id the "
                'lab makes fresh for every object, so no two trials share one), e.g. object: "sub_{{order_id}}"'
            )
        seen: dict[str, int] = {}
        for k, step in enumerate(objects.lifecycle):
            if step.state in seen:
                raise SpecError(
                    f"{source}: lifecycle.events[{k}].state: {step.state!r} is also the state of "
                    f"lifecycle.events[{seen[step.state]}]; each event's state must tell the lab which event "
                    "the consumer applied last (give each its own state)"
                )
            seen[step.state] = k
            _renders(partial(objects.template_of, spec.event, step, f"lifecycle.events[{k}]"), source)
    elif "order" in spec.expect.model_fields_set:
        raise SpecError(
            f"{source}: expect.order: {spec.expect.order!r} says how a lifecycle's events are applied, but "
            "the spec has no lifecycle: section; add one, or remove expect.order"
        )
    for k, sibling in enumerate(objects.siblings):
        _renders(partial(objects.template_of, spec.event, sibling, f"siblings[{k}]"), source)
    if objects.competitor is not None:
        texts = [objects.competitor.url, str(objects.competitor.body)]
        unknown = sorted(
            {n for t in texts for n in PLACEHOLDER.findall(t)} - COMPETITOR_PLACEHOLDERS - {"port"}
        )
        if unknown:
            raise SpecError(
                f"{source}: competitor: {{{{{unknown[0]}}}}} is not filled there; the competitor's url and body "
                "take {{order_id}}, {{object_id}} and {{event_id}} (the object it competes for)"
            )


def _renders(template: Callable[[], Mapping[str, Any]], source: str) -> None:
    """The template `template()` builds renders (its ``set:`` paths resolve), or SpecError naming `source`."""
    try:
        render(
            template(), event_id="evt_acklab_check", order_id="ord_acklab_check", seq=1, created=SAMPLE_TIME
        )
    except SpecError as exc:
        raise SpecError(f"{source}: {exc}") from None
