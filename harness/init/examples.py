"""The example payloads `acklab init` starts a target spec from: each provider's own published
example (or its SDK's test fixture), shipped in ``payloads/`` with its source and licence
(``payloads/SOURCES.md``), turned into an event template.

An `Example` says where in its body the event id and the object id go (``{{event_id}}``,
``{{order_id}}``: fresh per event, so no event of a run meets another's rows), which fields
are times (``{{unix_time}}``, ``{{timestamp}}``), and the provider's event-type header where
the body does not carry its type. Everything else stays as published.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

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

    @property
    def file(self) -> str:
        return f"{self.provider}.{self.event.replace('/', '.')}.json"

    def payload(self) -> dict[str, Any]:
        """The example exactly as published."""
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


def example(provider: str, event: str | None) -> Example:
    """The example of `provider` and `event` (the provider's first when `event` is None);
    SpecError naming the events there are otherwise."""
    if provider not in PROVIDERS:
        raise SpecError(f"--provider: got {provider!r}; expected one of {', '.join(PROVIDERS)}")
    known = events_of(provider)
    wanted = known[0] if event is None else event
    for candidate in EXAMPLES:
        if candidate.provider == provider and candidate.event in (wanted, wanted.replace(".", "/")):
            return candidate
    raise SpecError(
        f"--event: got {event!r}; acklab ships {provider} examples for {', '.join(known)}. Pick one of "
        "them (then edit the spec's event: to your own event's fields)"
    )
