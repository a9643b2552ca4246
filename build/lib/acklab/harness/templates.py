"""Event bodies: a target's event template, filled per event, and its conflicting twin.

Placeholders: ``{{event_id}}``, ``{{order_id}}``, ``{{seq}}`` (the event's number in the
run; a value that is exactly ``"{{seq}}"`` becomes an integer) and ``{{timestamp}}`` (the
event's creation time, ISO-8601). A body is rendered ONCE per event: every retry resends
the identical bytes, as real senders do.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from acklab.harness.errors import SpecError

PLACEHOLDER = re.compile(r"\{\{\s*([a-z_]+)\s*\}\}")
KNOWN = ("event_id", "order_id", "seq", "timestamp")


@dataclass(frozen=True)
class Event:
    """One webhook event of a trial: its id, type and exact body bytes."""

    event_id: str
    order_id: str
    seq: int
    event_type: str
    body: bytes
    document: Mapping[str, Any]


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
        if whole and whole.group(1) == "seq":
            return values["seq"]
        return PLACEHOLDER.sub(lambda m: str(values.get(m.group(1), m.group(0))), template)
    return template


def encode(document: Any) -> bytes:
    return json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def render(template: Mapping[str, Any], *, event_id: str, order_id: str, seq: int, timestamp: str) -> Event:
    values = {"event_id": event_id, "order_id": order_id, "seq": seq, "timestamp": timestamp}
    document = _fill(template, values)  # _fill builds new containers: the template is never shared
    event_type = document.get("type") if isinstance(document.get("type"), str) else "webhook"
    return Event(event_id, order_id, seq, str(event_type), encode(document), document)


def set_path(document: dict[str, Any], dotted: str, value: Any) -> None:
    """Set ``a.b.c`` in `document`, creating objects on the way."""
    node = document
    *parents, leaf = dotted.split(".")
    for part in parents:
        child = node.get(part)
        if not isinstance(child, dict):
            if child is not None:
                raise SpecError(f"conflict.set: {dotted!r} crosses {part!r}, which is not an object")
            child = node[part] = {}
        node = child
    node[leaf] = value


def conflicting(event: Event, changes: Mapping[str, Any]) -> Event:
    """The same event id with a different body: `changes` applied (``conflict.set``)."""
    document = copy.deepcopy(dict(event.document))
    for dotted, value in changes.items():
        set_path(document, dotted, value)
    body = encode(document)
    if body == event.body:
        raise SpecError(
            f"conflict.set {dict(changes)!r} leaves the body unchanged; set a field to a different value"
        )
    return Event(event.event_id, event.order_id, event.seq, event.event_type, body, document)
