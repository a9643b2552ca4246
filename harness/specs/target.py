"""The target spec (``kind: target``) as one typed value: `TargetSpec`, a model per section.

A spec is a dict for exactly as long as it takes to check it against its JSON Schema
(``evidence/schemas/target.schema.json``: the published contract, and the source of the
messages that name the field, the value and the fix); from then on it is a `TargetSpec`,
strict and frozen, read by attribute. `read_target` is the one way in (`harness.specs.load`
gives it a file); `tests/harness/specs/test_target_spec.py` keeps every model and its schema
object in step, both ways, as the evidence documents are.

A spec holds what was *written*: ``env:NAME`` values unread, run placeholders (``{{port}}``...)
unfilled. Reading the environment and filling placeholders are steps of serving
(`harness.targets`); `TargetSpec.filled` is the spec with placeholders filled, read again.

A new section (a topology, a queue, a provider's API) is one model here, one property in the
schema, and the code that uses it: nothing else reads the document.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, Literal, Self, cast, get_args

from pydantic import Field, ValidationError, model_validator

from acklab.evidence.documents.base import Omit, problems_of
from acklab.evidence.documents.records import SinkSource
from acklab.harness.errors import SpecError
from acklab.harness.specs import placeholders
from acklab.harness.specs.load import check, check_finite, load_spec
from acklab.harness.specs.sections import Headers, Items, Section
from acklab.harness.specs.service import (
    Command,
    Prepare,
    Queues,
    Setup,
    Topology,
    Worker,
)

DEFAULT_OBJECT = "{{order_id}}"
DEFAULT_MATCH = "{{order_id}}"
DEFAULT_OK_STATUS = (200, 201, 202, 204, 303, 409)
DEFAULT_CONFLICT_STATUS = (409, 422)


class Rotation(Section):
    """``signing.rotation``: a key rotation (key-rotation): the secret being retired; during the
    overlap the provider signs with both it and ``signing.secret``, the consumer's new one."""

    SCHEMA = "target#/properties/signing/properties/rotation"

    old_secret: str


class Signing(Section):
    """``signing:``: the provider whose signing the sender imitates, and its secret (``env:NAME``)."""

    SCHEMA = "target#/properties/signing"

    scheme: str
    secret: Omit[str] = None
    rotation: Omit[Rotation] = None

    @model_validator(mode="after")
    def _secret_unless_unsigned(self) -> Self:
        if self.scheme != "none" and self.secret is None:
            raise ValueError(f"signing.secret: scheme {self.scheme!r} signs with a secret; add one")
        return self


class Delivery(Section):
    """``delivery:``: the sender's timeout and the provider's event-type header."""

    SCHEMA = "target#/properties/delivery"

    timeout_s: Omit[float] = None  # None: the provider profile's
    event_type: Omit[str] = None  # None: from the body


class Conflict(Section):
    """``conflict:``: how a conflicting body under a used event id differs."""

    SCHEMA = "target#/properties/conflict"

    set: dict[str, Any]


class SqlEffects(Section):
    """``effects.sql``: read-only queries for one event's effects (and its state)."""

    SCHEMA = "target#/properties/effects/properties/sql"

    url: str
    count: str
    state: Omit[str] = None


class HttpEffects(Section):
    """``effects.http``: an endpoint that answers one event's effects (and its state)."""

    SCHEMA = "target#/properties/effects/properties/http"

    url: str
    json_path: str
    headers: Headers = Field(default_factory=dict)
    state_path: Omit[str] = None


class SmtpMatch(Section):
    """``effects.smtp.match`` as patterns: every field given must hold (`harness.sinks.matching`)."""

    SCHEMA = "target#/properties/effects/properties/smtp/properties/match/oneOf/1"

    to: Omit[str] = None  # a recipient, the whole address
    subject: Omit[str] = None
    body: Omit[str] = None
    text: Omit[str] = None  # the string form's rule: whole identifiers anywhere

    def __str__(self) -> str:
        return str(self.dump())  # as written, where a warning shows it


class SinkSection(Section):
    """A sink's section of ``effects:`` (`harness.sinks`): a server the lab runs on loopback for the
    whole run. What the spec side of a sink declares once: its run placeholder (where it listens)
    with the stand-in a check fills it with and how a port is written in it, and the source its
    effects are counted as beside the rows (``expect.max_<source>``, the trial's observations, a
    violation's ``source``; two sinks may share one: calls)."""

    PLACEHOLDER: ClassVar[str]
    STAND_IN: ClassVar[str]
    ADDRESS: ClassVar[str] = "{port}"  # the placeholder's value for a port the lab picks
    SOURCE: ClassVar[SinkSource]

    @property
    def address(self) -> str | None:
        """Where it listens as the spec says it (``host:port``); None: at its run placeholder."""
        value = getattr(self, "listen", None)
        return value if isinstance(value, str) else None


class SmtpEffects(SinkSection):
    """``effects.smtp``: the SMTP server the lab runs on loopback for the whole run."""

    SCHEMA = "target#/properties/effects/properties/smtp"
    PLACEHOLDER = "smtp_port"
    STAND_IN = "65534"
    SOURCE = "emails"

    listen: str
    match: str | SmtpMatch = DEFAULT_MATCH


class OutboundAnswer(Section):
    """How an outbound route answers a call."""

    SCHEMA = "target#/properties/effects/properties/outbound/properties/routes/items/properties/respond"

    status: int = 200
    json_body: Any = Field(default=None, alias="json")
    delay_s: float = 0.0
    drop: bool = False


class OutboundRoute(Section):
    """One route of the outbound API sink."""

    SCHEMA = "target#/properties/effects/properties/outbound/properties/routes/items"

    method: str = "POST"
    path: str
    match: Omit[str] = None  # None: the path's own placeholders
    respond: OutboundAnswer = Field(default_factory=OutboundAnswer)
    first: Omit[OutboundAnswer] = None


class OutboundEffects(SinkSection):
    """``effects.outbound``: a fake of the downstream API the consumer calls."""

    SCHEMA = "target#/properties/effects/properties/outbound"
    PLACEHOLDER = "outbound_port"
    STAND_IN = "65533"
    SOURCE = "calls"

    listen: str
    idempotency_header: Omit[str] = None
    routes: Items[OutboundRoute]


class ProviderApiEffects(SinkSection):
    """``effects.provider_api``: the provider's own API, which the lab serves on loopback for the
    whole run (at ``{{provider_api_url}}`` unless `listen` fixes the address); a change it executed
    (a refund, a capture) is a downstream effect: a call."""

    SCHEMA = "target#/properties/effects/properties/provider_api"
    PLACEHOLDER = "provider_api_url"
    STAND_IN = "http://127.0.0.1:65531"
    ADDRESS = "http://127.0.0.1:{port}"
    SOURCE = "calls"

    provider: Literal["stripe"] = "stripe"
    listen: Omit[str] = None


class Effects(Section):
    """``effects:``: the event's rows (exactly one of ``sql`` and ``http``) and the sinks."""

    SCHEMA = "target#/properties/effects"

    sql: Omit[SqlEffects] = None
    http: Omit[HttpEffects] = None
    smtp: Omit[SmtpEffects] = None
    outbound: Omit[OutboundEffects] = None
    provider_api: Omit[ProviderApiEffects] = None

    @model_validator(mode="after")
    def _one_source_of_rows(self) -> Self:
        if (self.sql is None) == (self.http is None):
            raise ValueError("effects: give exactly one of sql and http")
        return self

    @property
    def rows(self) -> SqlEffects | HttpEffects:
        """How the event's rows are read: ``sql`` or ``http`` (the model holds exactly one)."""
        return self.sql if self.sql is not None else cast(HttpEffects, self.http)

    @property
    def sinks(self) -> dict[str, SinkSection]:
        """The sinks the spec asks for, by name (`SINK_SECTIONS`' order)."""
        found = {name: getattr(self, name) for name in SINK_SECTIONS}
        return {name: section for name, section in found.items() if section is not None}


def _sink_sections() -> dict[str, type[SinkSection]]:
    """Every sink section `Effects` has, by its name under ``effects:``."""
    found = {}
    for name, info in Effects.model_fields.items():
        for model in get_args(info.annotation) or (info.annotation,):
            if isinstance(model, type) and issubclass(model, SinkSection):
                found[name] = model
    return found


# The sinks a spec may ask for (effects.<name>): a new sink is a `SinkSection` field of `Effects`.
SINK_SECTIONS: Mapping[str, type[SinkSection]] = _sink_sections()
# The run placeholders: the lab's own, then where each sink listens.
RUN_PLACEHOLDERS: tuple[str, ...] = (
    *placeholders.BASE_PLACEHOLDERS,
    *(model.PLACEHOLDER for model in SINK_SECTIONS.values()),
)
STAND_INS: Mapping[str, str] = {
    **placeholders.BASE_STAND_INS,
    **{model.PLACEHOLDER: model.STAND_IN for model in SINK_SECTIONS.values()},
}
# The sources of effects beside the database's rows (`SinkSection.SOURCE`), each ``expect.max_<source>``.
SINK_SOURCES: tuple[SinkSource, ...] = tuple(dict.fromkeys(model.SOURCE for model in SINK_SECTIONS.values()))


def run_placeholders_of(doc: Mapping[str, Any]) -> frozenset[str]:
    """The run placeholders a spec document uses outside its event body, and those of the sinks it
    asks for without an address of their own (served where the lab picks: ``{{provider_api_url}}``)."""
    found = set(placeholders.used(doc, RUN_PLACEHOLDERS))
    effects = doc.get("effects")
    for name, model in SINK_SECTIONS.items():
        section = effects.get(name) if isinstance(effects, Mapping) else None
        if isinstance(section, Mapping) and "listen" not in section:
            found.add(model.PLACEHOLDER)
    return frozenset(found)


class Database(Section):
    """``database:``: the PostgreSQL server a fresh database per served service is made on."""

    SCHEMA = "target#/properties/database"

    url: str


class LifecycleStep(Section):
    """One event of ``lifecycle.events``."""

    SCHEMA = "target#/properties/lifecycle/properties/events/items"

    type: str
    set: dict[str, Any] = Field(default_factory=dict)
    state: str | int | float | bool


class Lifecycle(Section):
    """``lifecycle:``: one object's events, in the order the provider emits them."""

    SCHEMA = "target#/properties/lifecycle"

    object: str = DEFAULT_OBJECT
    events: Items[LifecycleStep] = ()


class Sibling(Section):
    """One of ``siblings:``: another event for the same change as ``event``."""

    SCHEMA = "target#/properties/siblings/items"

    type: str
    set: dict[str, Any] = Field(default_factory=dict)


class Competitor(Section):
    """``competitor:``: the app's own request that can produce the same effect as the webhook."""

    SCHEMA = "target#/properties/competitor"

    method: Literal["POST", "PUT", "PATCH", "GET", "DELETE"] = "POST"
    url: str
    body: Any = None
    headers: Headers = Field(default_factory=dict)
    ok_status: Items[int] = DEFAULT_OK_STATUS


ConflictPolicy = Literal["reject", "ignore"]
Order = Literal["newest-wins", "arrival"]


class Totals(Section):
    """``expect.totals``: a running total the consumer keeps (invariant totals-match): `field`, the
    dotted path of the provider's running total in each event's body; `sum`, the query reading the
    consumer's (``:object_id``, ``:event_id`` bound; on effects.sql's read-only connection)."""

    SCHEMA = "target#/properties/expect/properties/totals"

    field: str
    sum: str

    def of(self, document: Mapping[str, Any]) -> int | float | None:
        """The running total `document` (an event's body) carries at `field` (None: none there)."""
        node: Any = document
        for part in self.field.split("."):
            if isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            elif isinstance(node, Mapping) and part in node:
                node = node[part]
            else:
                return None
        return node if isinstance(node, int | float) and not isinstance(node, bool) else None

    def as_dict(self) -> dict[str, str]:
        return {"field": self.field, "sum": self.sum}


class Expect(Section):
    """``expect:``: what a correct handler does (docs/targets.md); also a trial's record of it.

    At most `max_effects` per event. A conflicting body under a used event id is, with
    `conflict` ``reject`` (the default), answered with one of `conflict_status`; with
    ``ignore`` (dedupe by id) answered 2xx. Either way effects — and the state, where probed —
    stay exactly as the first body left them. `effects_within_s`: how long after a 2xx the
    effect may take to appear (ack-then-process consumers); verdicts wait that long.
    """

    SCHEMA = "target#/properties/expect"

    max_effects: int = 1
    max_emails: int = 1  # effects.smtp
    max_calls: int = 1  # effects.outbound (calls with one idempotency key are one)
    conflict: ConflictPolicy = "reject"
    conflict_status: Items[int] = DEFAULT_CONFLICT_STATUS
    effects_within_s: float = 0.0
    order: Order = "newest-wins"
    totals: Omit[Totals] = None  # a running total the consumer keeps (totals-match)

    def max_of(self, source: str) -> int:
        """At most how many effects of `source` one event may have (``rows``: `max_effects`;
        a sink's: ``max_<source>``)."""
        value = self.max_effects if source == "rows" else getattr(self, f"max_{source}")
        return int(value)

    def as_dict(self) -> dict[str, Any]:
        """What a trial records of it (``parameters.expect``): every field but the lifecycle's order."""
        doc: dict[str, Any] = {
            "max_effects": self.max_effects,
            **{f"max_{source}": self.max_of(source) for source in SINK_SOURCES},
            "conflict": self.conflict,
            "conflict_status": list(self.conflict_status),
            "effects_within_s": self.effects_within_s,
        }
        if self.totals is not None:
            doc["totals"] = self.totals.as_dict()
        return doc

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> Expect:
        """The inverse of `as_dict` (a trial record's ``parameters.expect``; older records lack
        fields, which take their defaults)."""
        try:
            return cls.model_validate(dict(doc))
        except ValidationError as exc:
            found = problems_of(exc)
            raise SpecError(f"expect: {found[0] if found else exc}") from None


class TargetSpec(Section):
    """A target spec (``kind: target``): a webhook endpoint under test and how to count its effects."""

    SCHEMA = "target"

    api_version: Literal["acklab/v1"] = Field(alias="apiVersion")
    kind: Literal["target"]
    name: str
    endpoint: str
    headers: Headers = Field(default_factory=dict)
    signing: Signing
    delivery: Delivery = Field(default_factory=Delivery)
    command: Omit[Command] = None
    setup: Omit[Setup] = None
    prepare: Omit[Prepare] = None
    services: Items[str] = ()  # what the lab starts beside the consumer (harness.services: redis)
    workers: Items[Worker] = ()
    queues: Omit[Items[str] | Queues] = None  # the keys alone, or with their waits
    topology: Topology = Field(default_factory=Topology)
    database: Omit[Database] = None
    event: dict[str, Any]
    conflict: Omit[Conflict] = None
    effects: Effects
    lifecycle: Omit[Lifecycle] = None
    siblings: Items[Sibling] = ()
    competitor: Omit[Competitor] = None
    expect: Expect = Field(default_factory=Expect)

    @property
    def run_placeholders(self) -> frozenset[str]:
        """The run placeholders (``{{port}}``, ``{{scratch}}``...) the spec uses outside its event body,
        and where a sink without an address of its own is served (`run_placeholders_of`)."""
        return run_placeholders_of(self.dump())

    def check_placeholders(self, *, source: str, in_process: bool = False) -> None:
        """Refuse (exit 3) an unknown placeholder, or one nothing would fill (`placeholders.check`)."""
        placeholders.check(self.dump(), RUN_PLACEHOLDERS, source=source, in_process=in_process)

    def filled(self, values: Mapping[str, str]) -> TargetSpec:
        """The spec with the run placeholders in `values` filled (the event body is left alone)."""
        if not values:
            return self
        return read_target(placeholders.fill(self.dump(), values), source=self.name, schema=False)

    def stand_in(self) -> TargetSpec:
        """The spec with stand-ins for every run placeholder: what a check sees before anything is served."""
        return self.filled(STAND_INS)

    def excerpt(self, *sections: str) -> dict[str, Any]:
        """The sections named, as written (those the spec sets), for showing."""
        return {name: value for name, value in self.dump().items() if name in sections}

    def merged(self, overrides: Mapping[str, Any], *, secret: str | None = None) -> TargetSpec:
        """This spec with keyword fields over it (`merge`), checked as a whole (exit 3 naming the field)."""
        return read_target(merge(self.dump(), overrides, secret=secret), source=self.name)


# The fields `acklab.attack()` and `webhook_lab` take as keywords, by their spec name.
FIELDS = (
    "name",
    "endpoint",
    "signing",
    "event",
    "conflict",
    "expect",
    "headers",
    "delivery",
    "lifecycle",
    "siblings",
    "competitor",
)


def merge(
    base: Mapping[str, Any], overrides: Mapping[str, Any], *, secret: str | None = None
) -> dict[str, Any]:
    """The document of `base` with the keyword fields of `overrides` over it (`FIELDS`; None: not
    given). ``signing`` may be a scheme's name, ``conflict`` the ``set:`` mapping itself; `secret`
    is ``signing.secret`` (scheme ``standard`` when none is named). ``command:`` is dropped: the
    caller serves the app object itself."""
    doc: dict[str, Any] = {"apiVersion": "acklab/v1", "kind": "target", **base}
    doc.pop("command", None)
    for key in FIELDS:
        value = overrides.get(key)
        if value is None:
            continue
        if isinstance(value, Section):
            value = value.dump()
        elif key == "signing" and isinstance(value, str):
            value = {"scheme": value}
        elif key == "conflict" and isinstance(value, Mapping) and set(value) != {"set"}:
            value = {"set": dict(value)}
        elif key == "siblings" and isinstance(value, list | tuple):
            value = [v.dump() if isinstance(v, Section) else v for v in value]
        doc[key] = value
    signing = dict(doc.get("signing") or {})
    if secret is not None:
        signing = {"scheme": signing.get("scheme", "standard"), **signing, "secret": secret}
    doc["signing"] = signing or {"scheme": "none"}
    return doc


def read_target(doc: Any, *, source: str, schema: bool = True) -> TargetSpec:
    """`doc` as a `TargetSpec`: NaN and infinities refused, then the JSON Schema (its messages name
    the field, the value and the fix), then the model (SpecError, exit 3, either way).

    `schema=False`: `doc` is a checked spec's own dump with values filled in (`TargetSpec.filled`)."""
    if schema:
        check_finite(doc, source=source)
        check("target", doc, source=source)
    try:
        return TargetSpec.model_validate(doc)
    except ValidationError as exc:
        found = problems_of(exc)
        where = found[0].replace("/", ".") if found else str(exc)
        raise SpecError(f"{source}: invalid target spec: {where}") from None


def load_target_spec(path: Path) -> TargetSpec:
    """A ``kind: target`` spec file as a `TargetSpec` (its schema's messages, exit 3, when it is not one)."""
    _, doc = load_spec(path, expected_kind="target")
    return read_target(doc, source=str(path), schema=False)
