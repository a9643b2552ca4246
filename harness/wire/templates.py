"""Event bodies: a target's event template, filled per event, and its conflicting twin.

Placeholders: ``{{event_id}}``, ``{{order_id}}``, ``{{seq}}`` (the event's number in the
run), ``{{timestamp}}`` (the event's creation time, ISO-8601), ``{{unix_time}}`` and
``{{unix_time_ms}}`` (the same time as Unix seconds / milliseconds, e.g. Stripe's
``created``), ``{{event_time}}`` (the event's creation time in integer seconds: along a
lifecycle it increases event by event, `harness.core.objects`; in any other event it is
``{{unix_time}}``), ``{{amount_cents}}`` and ``{{currency}}`` (drawn per event from the seed,
`harness.wire.variation`). A value that is exactly one of the numeric placeholders
(``"{{seq}}"``, ``"{{unix_time}}"``, ``"{{unix_time_ms}}"``, ``"{{event_time}}"``,
``"{{amount_cents}}"``) becomes a JSON integer. A body is rendered ONCE per event: every retry
resends the identical bytes, as real senders do. With ``vary``, the fields of every object come
in a drawn order.

``conflict.set`` paths are dotted; a numeric segment indexes a list
(``commits.0.message``, ``alerts.0.labels.severity``). A path must exist in the rendered
event up to its last segment (`resolve_path` says where it stops otherwise).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from acklab.harness.errors import SpecError
from acklab.harness.wire.variation import Draw

PLACEHOLDER = re.compile(r"\{\{\s*([a-z_]+)\s*\}\}")
KNOWN = (
    "event_id",
    "order_id",
    "seq",
    "timestamp",
    "unix_time",
    "unix_time_ms",
    "event_time",
    "amount_cents",
    "currency",
)
INTEGERS = frozenset({"seq", "unix_time", "unix_time_ms", "event_time", "amount_cents"})


@dataclass(frozen=True)
class WebhookEvent:
    """One webhook event of a trial: its id, type and exact body bytes."""

    event_id: str
    order_id: str
    seq: int
    event_type: str
    body: bytes
    document: Mapping[str, Any]
    created_at: str = ""  # ISO-8601, when the event was created ({{timestamp}})
    # The object the event concerns (a lifecycle's ``object:`` rendered; by default its order
    # id): count and state queries get it as ``:object_id``.
    object_id: str = ""
    event_time: int = 0  # {{event_time}}: the creation time in Unix seconds
    # The provider's event-type header when the event says it itself (a lifecycle or sibling
    # event's ``type:``); None: the target's (delivery.event_type, or from the body).
    type_header: str | None = None


def unknown_placeholders(template: Any, where: str = "event") -> list[str]:
    """Every placeholder of `template` that is not one of KNOWN, as 'path: {{name}}'."""
    found: list[str] = []
    if isinstance(template, dict):
        for key, value in template.items():
            found += unknown_placeholders(value, f"{where}.{key}")
    elif isinstance(template, list):
        for i, value in enumerate(template):
            found += unknown_placeholders(value, f"{where}[{i}]")
    elif isinstance(template, str):
        found += [f"{where}: {{{{{name}}}}}" for name in PLACEHOLDER.findall(template) if name not in KNOWN]
    return found


def _fill(template: Any, values: Mapping[str, Any]) -> Any:
    if isinstance(template, dict):
        return {key: _fill(value, values) for key, value in template.items()}
    if isinstance(template, list):
        return [_fill(value, values) for value in template]
    if isinstance(template, str):
        whole = PLACEHOLDER.fullmatch(template)
        if whole and whole.group(1) in INTEGERS:
            return values[whole.group(1)]
        return PLACEHOLDER.sub(lambda m: str(values.get(m.group(1), m.group(0))), template)
    return template


def encode(document: Any) -> bytes:
    return json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def render(
    template: Mapping[str, Any],
    *,
    event_id: str,
    order_id: str,
    seq: int,
    created: datetime,
    object_template: str = "{{order_id}}",
    vary: bool = False,
    avoid_amounts: tuple[int, ...] = (),
) -> WebhookEvent:
    """The event's body: `template` with every placeholder filled (`created` must be aware); its
    object is `object_template` filled the same way. The drawn amount is never one of
    `avoid_amounts` (the conflict's), `vary` reorders the fields."""
    timestamp = created.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    unix_ms = int(created.timestamp() * 1000)
    values = {
        "event_id": event_id,
        "order_id": order_id,
        "seq": seq,
        "timestamp": timestamp,
        "unix_time": unix_ms // 1000,
        "unix_time_ms": unix_ms,
        "event_time": unix_ms // 1000,
        **(draw := Draw(event_id)).values(avoid_amounts),
    }
    document = _fill(template, values)  # _fill builds new containers: the template is never shared
    if vary:
        document = draw.reordered(document)
    event_type = document.get("type") if isinstance(document.get("type"), str) else "webhook"
    object_id = str(_fill(object_template, values))
    return WebhookEvent(
        event_id,
        order_id,
        seq,
        str(event_type),
        encode(document),
        document,
        timestamp,
        object_id=object_id,
        event_time=unix_ms // 1000,
    )


def with_set(
    template: Mapping[str, Any], changes: Mapping[str, Any], *, event_type: str | None, field: str = "set"
) -> dict[str, Any]:
    """`template` with `changes` set (the ``set:`` of a lifecycle or sibling event: values may hold
    placeholders, filled with the event's own) and, where it has a top-level ``type``, that type
    made `event_type`."""
    derived = copy.deepcopy(dict(template))
    for dotted, value in changes.items():
        set_path(derived, dotted, value, field)
    if event_type is not None and isinstance(derived.get("type"), str):
        derived["type"] = event_type
    return derived


def _segment(node: Any, part: str) -> tuple[bool, Any]:
    """(found, child) of one path segment: a key of an object, or an index of a list."""
    if isinstance(node, dict):
        return (part in node, node.get(part))
    if isinstance(node, list) and part.isdigit() and int(part) < len(node):
        return (True, node[int(part)])
    return (False, None)


def _kind(node: Any) -> str:
    if isinstance(node, dict):
        return "an object"
    if isinstance(node, list):
        return f"a list of {len(node)}"
    return f"a {type(node).__name__} ({node!r})"


def resolve_path(document: Any, dotted: str, field: str = "conflict.set") -> None:
    """Raise SpecError unless every segment of `dotted` but the last exists in `document` and
    the last one can be set there (a key of an object, an existing index of a list)."""
    parts = dotted.split(".")
    node = document
    for depth, part in enumerate(parts):
        last = depth == len(parts) - 1
        where = ".".join(parts[:depth]) or "the event"
        if isinstance(node, dict) and last:
            return
        found, child = _segment(node, part)
        if not found:
            if isinstance(node, list):
                why = (
                    f"{where} is {_kind(node)}: index {part} does not exist"
                    if part.isdigit()
                    else f"{where} is {_kind(node)}: {part!r} is not an index (use a number, e.g. {where}.0)"
                )
            elif isinstance(node, dict):
                why = f"{where} has no {part!r} (it has {', '.join(map(repr, node)) or 'no fields'})"
            else:
                why = f"{where} is {_kind(node)}, not an object or a list"
            raise SpecError(f"{field}: the path {dotted!r} stops at {part!r}: {why}")
        node = child


def set_path(document: dict[str, Any], dotted: str, value: Any, field: str = "conflict.set") -> None:
    """Set ``a.b.0.c`` in `document` (it must resolve, see `resolve_path`)."""
    resolve_path(document, dotted, field)
    *parents, leaf = dotted.split(".")
    node: Any = document
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]
    if isinstance(node, list):
        node[int(leaf)] = value
    else:
        node[leaf] = value


def conflicting(event: WebhookEvent, changes: Mapping[str, Any]) -> WebhookEvent:
    """The same event id with a different body: `changes` applied (``conflict.set``)."""
    document = copy.deepcopy(dict(event.document))
    for dotted, value in changes.items():
        set_path(document, dotted, value)
    body = encode(document)
    if body == event.body:
        raise SpecError(
            f"conflict.set {dict(changes)!r} leaves the body unchanged; set a field to a different value"
        )
    return dataclasses.replace(event, body=body, document=document)
