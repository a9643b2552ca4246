"""The example payloads `acklab init` starts a target spec from: each provider's own published
example (or its SDK's test fixture), shipped in ``payloads/``, named by its provider's record
with its source and licence (`harness.wire.providers`), turned into an event template.

An `Example` says where in its body the event id and the object id go (``{{event_id}}``,
``{{order_id}}``: fresh per event, so no event of a run meets another's rows), which fields
are times (``{{unix_time}}``, ``{{timestamp}}``), and the provider's event-type header where
the body does not carry its type. Everything else stays as published.

Where the published examples do not fit, init starts from the user's own event: ``--event TYPE``
of a type acklab ships no example of is the provider's first example under that type, and
``--example FILE`` is a body captured from the provider's dashboard or the app's log
(`from_file`): its event id where the provider puts one (else a top-level ``id``), its object
where the provider's example has it and every field named like an order (``order_id``,
``orderId``, ``metadata.order``...), its times where the provider's are.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import re
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any

from acklab.evidence.loading import load_json
from acklab.harness.errors import SpecError
from acklab.harness.wire.conflicts import value_at
from acklab.harness.wire.providers import PROVIDERS as RECORDS
from acklab.harness.wire.providers import Example
from acklab.harness.wire.templates import set_path

__all__ = [
    "EXAMPLES",
    "PROVIDERS",
    "Example",
    "events_of",
    "example",
    "from_file",
    "object_prefix",
    "payload",
    "template",
]

# Every provider's published examples, and the providers that have one (`--provider`).
EXAMPLES: tuple[Example, ...] = tuple(e for record in RECORDS.values() for e in record.examples)
PROVIDERS: tuple[str, ...] = tuple(name for name, record in RECORDS.items() if record.examples)
ID_PREFIX = re.compile(r"^([A-Za-z]+_)")


def payload(example: Example) -> dict[str, Any]:
    """The example exactly as published (or as the user captured it: ``--example``)."""
    if example.body is not None:
        return copy.deepcopy(dict(example.body))
    text = resources.files("acklab.harness.init").joinpath("payloads", example.file).read_text("utf-8")
    doc: dict[str, Any] = json.loads(text)
    return doc


def template(example: Example) -> dict[str, Any]:
    """The example as an event template: ids and times replaced by placeholders."""
    doc = copy.deepcopy(payload(example))
    for path, value in example.added.items():
        set_path(doc, path, value)
    for path in example.event_ids:
        set_path(doc, path, "{{event_id}}")
    if example.object_id:
        set_path(doc, example.object_id, "{{order_id}}")
    for path in example.object_ids:
        set_path(doc, path, "{{order_id}}")
    if example.retyped is not None and isinstance(doc.get("type"), str):
        doc["type"] = example.retyped
    for path in example.unix_times:
        set_path(doc, path, "{{unix_time}}")
    for path in example.iso_times:
        set_path(doc, path, "{{timestamp}}")
    return doc


def object_prefix(example: Example) -> str:
    """The published object id's type prefix (Stripe's ``pi_``), kept when the object id is
    derived from the event id (`keyed_by_event`)."""
    if not example.object_id:
        return ""
    found, value = value_at(payload(example), example.object_id)
    match = ID_PREFIX.match(value) if found and isinstance(value, str) else None
    return match.group(1) if match else ""


def events_of(provider: str) -> list[str]:
    return [e.event for e in EXAMPLES if e.provider == provider]


EVENT_TYPE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_./:-]{0,199}$")
ORDERISH = re.compile(r"order", re.IGNORECASE)
TIME_KEYS = {"created": "unix", "created_at": "iso", "timestamp": "iso", "occurred_at": "iso"}


def example(provider: str, event: str | None) -> Example:
    """The example of `provider` and `event` (the provider's first when `event` is None); an event
    type acklab ships no example of is the provider's first example under that type."""
    if provider not in PROVIDERS:
        raise SpecError(f"--provider: got {provider!r}; expected one of {', '.join(PROVIDERS)}")
    known = events_of(provider)
    wanted = known[0] if event is None else event
    for candidate in EXAMPLES:
        if candidate.provider == provider and candidate.event in (wanted, wanted.replace(".", "/")):
            return candidate
    if not EVENT_TYPE.match(wanted):
        raise SpecError(f"--event: got {event!r}; expected an event type such as order.paid")
    first = next(e for e in EXAMPLES if e.provider == provider)
    if "type" in payload(first):
        return dataclasses.replace(first, event=wanted, retyped=wanted, published=first.event)
    return dataclasses.replace(first, event=wanted, event_type=wanted, published=first.event)


def from_file(path: Path, provider: str, event: str | None) -> Example:
    """The user's own event (``--example FILE``) as an example of `provider` (see the module)."""
    if provider not in PROVIDERS:
        raise SpecError(f"--provider: got {provider!r}; expected one of {', '.join(PROVIDERS)}")
    shipped = next(e for e in EXAMPLES if e.provider == provider)
    body = _captured_body(path, shipped)
    event_ids = _captured_event_ids(path, body, shipped)
    object_id = shipped.object_id if shipped.object_id and value_at(body, shipped.object_id)[0] else None
    orderish = tuple(
        p for p in _scalar_paths(body) if ORDERISH.search(p.rsplit(".", 1)[-1]) and p not in event_ids
    )
    kind = event or str(body.get("type") or shipped.event)
    if not EVENT_TYPE.match(kind):
        raise SpecError(f"--event: got {kind!r}; expected an event type such as order.paid")
    unix_times, iso_times = _captured_times(body, shipped)
    return Example(
        provider,
        kind,
        event_ids=event_ids,
        object_id=object_id,
        unix_times=unix_times,
        iso_times=iso_times,
        event_type=(event or shipped.event_type) if shipped.event_type else None,
        source=f"the user's own event (--example {path})",
        licence="the user's",
        body=body,
        captured=str(path),
        object_ids=tuple(p for p in orderish if p != object_id),
        retyped=event if event and isinstance(body.get("type"), str) else None,
    )


def _captured_body(path: Path, shipped: Example) -> dict[str, Any]:
    """The captured event's object, with what the provider's template adds where it lacks it."""
    body = load_json(path, what=f"--example {path}")
    if not isinstance(body, dict):
        raise SpecError(f"--example {path}: got a JSON {type(body).__name__}; expected the event's object")
    added = {p: v for p, v in shipped.added.items() if not value_at(body, p)[0]}
    return {**body, **added}  # Standard Webhooks: the id travels in webhook-id; a template names one


def _captured_event_ids(path: Path, body: dict[str, Any], shipped: Example) -> tuple[str, ...]:
    """Where the captured event's id is: where the provider puts one, else a top-level ``id``."""
    event_ids = tuple(p for p in shipped.event_ids if value_at(body, p)[0]) or (
        ("id",) if isinstance(body.get("id"), str | int) else ()
    )
    if not event_ids:
        raise SpecError(
            f"--example {path}: no event id where {shipped.provider} puts one "
            f"({', '.join(shipped.event_ids)}) and "
            'no top-level id; add one ("id": "evt_1"): the lab gives every event its own'
        )
    return event_ids


def _captured_times(body: dict[str, Any], shipped: Example) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The captured event's unix and ISO times: where the provider's are, then the usual keys."""
    unix = (p for p, kind in TIME_KEYS.items() if kind == "unix" and isinstance(body.get(p), int))
    iso = (p for p, kind in TIME_KEYS.items() if kind == "iso" and isinstance(body.get(p), str))
    shipped_unix = (p for p in shipped.unix_times if value_at(body, p)[0])
    shipped_iso = (p for p in shipped.iso_times if value_at(body, p)[0])
    return tuple(dict.fromkeys((*shipped_unix, *unix))), tuple(dict.fromkeys((*shipped_iso, *iso)))


def _scalar_paths(doc: Any, where: str = "") -> list[str]:
    """Dotted paths of the strings and integers in `doc` (lists by index)."""
    found: list[str] = []
    items = doc.items() if isinstance(doc, Mapping) else enumerate(doc) if isinstance(doc, list) else ()
    for key, value in items:
        path = f"{where}.{key}" if where else str(key)
        if isinstance(value, str | int) and not isinstance(value, bool):
            found.append(path)
        else:
            found += _scalar_paths(value, path)
    return found
