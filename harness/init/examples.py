"""The example payloads `acklab init` starts a target spec from: each provider's own published
example (or its SDK's test fixture), shipped in ``payloads/`` with its source and licence
(``payloads/SOURCES.md``), turned into an event template.

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
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from acklab.evidence.loading import load_json
from acklab.harness.errors import SpecError
from acklab.harness.wire.conflicts import value_at
from acklab.harness.wire.templates import set_path

PROVIDERS = ("stripe", "github", "gitlab", "shopify", "standard")
ID_PREFIX = re.compile(r"^([A-Za-z]+_)")


@dataclass(frozen=True)
class Example:
    """One published example payload and how it becomes a template."""

    provider: str
    event: str  # what --event names
    event_ids: tuple[str, ...]  # body paths that carry the event id ({{event_id}})
    object_id: str | None = None  # the body path of the object the event is about ({{order_id}})
    unix_times: tuple[str, ...] = ()
    iso_times: tuple[str, ...] = ()
    event_type: str | None = None  # delivery.event_type, where the body's `type` does not say it
    added: Mapping[str, Any] = field(default_factory=dict)  # fields the lab adds (documented)
    body: Mapping[str, Any] | None = None  # the user's own event (--example), instead of the shipped file
    source: str | None = None  # where `body` came from
    object_ids: tuple[str, ...] = ()  # more body paths naming the object ({{order_id}}, prefix kept)
    retyped: str | None = None  # --event TYPE: the type set in the body's `type`, when it has one
    published: str | None = None  # the shipped example an unshipped --event TYPE starts from

    @property
    def file(self) -> str:
        return f"{self.provider}.{(self.published or self.event).replace('/', '.')}.json"

    def payload(self) -> dict[str, Any]:
        """The example exactly as published (or as the user captured it)."""
        if self.body is not None:
            return copy.deepcopy(dict(self.body))
        text = resources.files("acklab.harness.init").joinpath("payloads", self.file).read_text("utf-8")
        doc: dict[str, Any] = json.loads(text)
        return doc

    def template(self) -> dict[str, Any]:
        """The example as an event template: ids and times replaced by placeholders."""
        doc = copy.deepcopy(self.payload())
        for path, value in self.added.items():
            set_path(doc, path, value)
        for path in self.event_ids:
            set_path(doc, path, "{{event_id}}")
        if self.object_id:
            set_path(doc, self.object_id, "{{order_id}}")
        for path in self.object_ids:
            set_path(doc, path, "{{order_id}}")
        if self.retyped is not None and isinstance(doc.get("type"), str):
            doc["type"] = self.retyped
        for path in self.unix_times:
            set_path(doc, path, "{{unix_time}}")
        for path in self.iso_times:
            set_path(doc, path, "{{timestamp}}")
        return doc

    def object_prefix(self) -> str:
        """The published object id's type prefix (Stripe's ``pi_``), kept when the object id is
        derived from the event id (`keyed_by_event`)."""
        if not self.object_id:
            return ""
        found, value = value_at(self.payload(), self.object_id)
        match = ID_PREFIX.match(value) if found and isinstance(value, str) else None
        return match.group(1) if match else ""


def _stripe(event: str) -> Example:
    return Example("stripe", event, event_ids=("id",), object_id="data.object.id", unix_times=("created",))


EXAMPLES: tuple[Example, ...] = (
    _stripe("payment_intent.succeeded"),
    _stripe("checkout.session.completed"),
    _stripe("charge.succeeded"),
    # GitHub names the delivery in X-GitHub-Delivery; the body carries it where a push names
    # its head commit, so the template has its event id and each event its own commit.
    Example("github", "push", event_ids=("after", "head_commit.id", "commits.0.id"), event_type="push"),
    Example(
        "github",
        "pull_request.opened",
        event_ids=("pull_request.head.sha",),
        object_id="pull_request.node_id",
        event_type="pull_request",
    ),
    Example("github", "issues.opened", event_ids=("issue.node_id",), event_type="issues"),
    Example("gitlab", "push", event_ids=("after", "checkout_sha", "commits.1.id")),
    Example(
        "shopify",
        "orders/create",
        event_ids=("token",),
        object_id="id",
        iso_times=("created_at", "updated_at"),
        event_type="orders/create",
    ),
    Example(
        "shopify",
        "orders/paid",
        event_ids=("token",),
        object_id="id",
        iso_times=("created_at", "updated_at"),
        event_type="orders/paid",
    ),
    # Standard Webhooks carries the event id in webhook-id; the spec's example body has none,
    # so the template adds a top-level id (a template must name {{event_id}}).
    Example(
        "standard",
        "contact.created",
        event_ids=("id",),
        object_id="data.id",
        iso_times=("timestamp",),
        added={"id": ""},
    ),
)


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
    if "type" in first.payload():
        return dataclasses.replace(first, event=wanted, retyped=wanted, published=first.event)
    return dataclasses.replace(first, event=wanted, event_type=wanted, published=first.event)


def from_file(path: Path, provider: str, event: str | None) -> Example:
    """The user's own event (``--example FILE``) as an example of `provider` (see the module)."""
    if provider not in PROVIDERS:
        raise SpecError(f"--provider: got {provider!r}; expected one of {', '.join(PROVIDERS)}")
    body = load_json(path, what=f"--example {path}")
    if not isinstance(body, dict):
        raise SpecError(f"--example {path}: got a JSON {type(body).__name__}; expected the event's object")
    shipped = next(e for e in EXAMPLES if e.provider == provider)
    added = {p: v for p, v in shipped.added.items() if not value_at(body, p)[0]}
    body = {**body, **added}  # Standard Webhooks: the id travels in webhook-id; a template names one
    event_ids = tuple(p for p in shipped.event_ids if value_at(body, p)[0]) or (
        ("id",) if isinstance(body.get("id"), str | int) else ()
    )
    if not event_ids:
        raise SpecError(
            f"--example {path}: no event id where {provider} puts one ({', '.join(shipped.event_ids)}) and "
            'no top-level id; add one ("id": "evt_1"): the lab gives every event its own'
        )
    object_id = shipped.object_id if shipped.object_id and value_at(body, shipped.object_id)[0] else None
    orderish = tuple(
        p for p in _scalar_paths(body) if ORDERISH.search(p.rsplit(".", 1)[-1]) and p not in event_ids
    )
    unix = tuple(p for p, kind in TIME_KEYS.items() if kind == "unix" and isinstance(body.get(p), int))
    iso = tuple(p for p, kind in TIME_KEYS.items() if kind == "iso" and isinstance(body.get(p), str))
    kind = event or str(body.get("type") or shipped.event)
    if not EVENT_TYPE.match(kind):
        raise SpecError(f"--event: got {kind!r}; expected an event type such as order.paid")
    return Example(
        provider,
        kind,
        event_ids=event_ids,
        object_id=object_id,
        unix_times=tuple(dict.fromkeys((*(p for p in shipped.unix_times if value_at(body, p)[0]), *unix))),
        iso_times=tuple(dict.fromkeys((*(p for p in shipped.iso_times if value_at(body, p)[0]), *iso))),
        event_type=(event or shipped.event_type) if shipped.event_type else None,
        body=body,
        source=str(path),
        object_ids=tuple(p for p in orderish if p != object_id),
        retyped=event if event and isinstance(body.get("type"), str) else None,
    )


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
