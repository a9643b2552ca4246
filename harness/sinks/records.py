"""What a sink records: one message or call, bounded, secrets redacted, and the events it matched.

A consumer under test talks to the sinks; what it sends is an adversary's input like any
other. So a record keeps a bounded excerpt of the body and the sha256 of every byte
received; a message or a call past `SinkLimits` is cut off and recorded as ``capped``, and
past ``max_records`` the sink stops keeping records (it counts what it dropped). Header
values whose names say credential (``Authorization``, ``X-Api-Key``, ``Cookie``...) are
never kept, and are remembered as secrets, so no writer of the lab prints them elsewhere
(an excerpt that quotes them is redacted too).

What the verdicts count is not the records: each message or call that matched an event is
added to that event's `EventCount` whether or not its record is kept, so no cap drops a
duplicate. A record the sinks could not keep whole (capped or dropped) is remembered with its
time: a trial running since then has evidence that does not show everything it counted
(`Ledger.unread_since`), and is an error unless it proved a violation.
"""

from __future__ import annotations

import hashlib
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Literal

from acklab.evidence.redaction import REDACTED, redact, remember
from acklab.harness.sinks.reading import Text

# The shape of a record: a message, a call to an API, a call to the provider's API (its objects, its effect).
RecordKind = Literal["email", "call", "api"]
# A header whose name says credential: its value is a secret of the consumer's.
_SECRET_NAME = re.compile(r"auth|key|token|secret|passw|cookie|signature|credential", re.IGNORECASE)
EXCERPT_BYTES = 2048
READS = frozenset({"GET", "HEAD", "OPTIONS"})  # a call with these methods is a read, never an effect
FailureMode = Literal["refuse", "stall"]  # how a sink fails an event's effects on purpose (effect-failure)
# What a record's ``served`` says when a sink refused the effect on purpose: no effect took place.
REFUSALS = ("refused", "stalled", "unavailable")
MAX_KEYS_SHOWN = 20


@dataclass(frozen=True)
class SinkLimits:
    """How much the sinks take in: bytes per message or call body, and records per run."""

    max_bytes: int = 1 << 20
    max_records: int = 10_000


def redacted_headers(
    headers: Iterable[tuple[str, str]], *, keep: frozenset[str] = frozenset()
) -> dict[str, str]:
    """`headers` as a record shows them: a credential-named value (not in `keep`) as ``[redacted]``,
    and remembered as a secret; every other value through the process's redaction."""
    shown: dict[str, str] = {}
    for name, value in headers:
        if name.lower() not in keep and _SECRET_NAME.search(name):
            remember(value, *value.split()[1:])  # "Bearer sk_..." : the token alone too
            shown[name] = REDACTED
        else:
            shown[name] = redact(value)[:500]
    return shown


@dataclass(frozen=True)
class SinkRecord:
    """One message the SMTP sink received, one call the outbound sink answered, or one call the
    provider's API answered."""

    kind: RecordKind
    sink: str  # the sink that received it (its name: effects.<sink>)
    seq: int  # per sink, from 0
    at: str  # RFC 3339
    at_mono: float
    events: tuple[str, ...]  # the event ids it matched
    headers: Mapping[str, str]
    excerpt: str
    sha256: str
    size: int
    capped: bool
    # Per matched event: its database effects when this arrived (None: the lab reads none).
    rows_at_arrival: Mapping[str, int | None] = field(default_factory=dict)
    # email
    sender: str | None = None
    recipients: tuple[str, ...] = ()
    # call
    method: str | None = None
    path: str | None = None
    route: int | None = None  # index into outbound.routes (None: no route matched: 404)
    status: int | None = None  # what the sink answered (None: it dropped the connection)
    idempotency_key: str | None = None
    # api
    objects: tuple[str, ...] = ()  # the provider's objects the call read or changed
    # the fault that answered it: lag, stale, throttled, unavailable (a call), refused (an email)
    served: str | None = None
    served_for: str | None = None  # the event that fault was armed for
    effect: bool = False  # the provider executed a change (a refund made); a replay is none
    replayed: bool = False  # answered with an idempotency key's saved answer
    echoed: tuple[str, ...] = ()  # events the provider sent back before answering it

    def as_dict(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "kind": self.kind,
            "seq": self.seq,
            "at": self.at,
            "events": list(self.events),
            "headers": dict(self.headers),
            "excerpt": self.excerpt,
            "sha256": self.sha256,
            "bytes": self.size,
            "capped": self.capped,
            "rows_at_arrival": dict(self.rows_at_arrival),
        }
        if self.served is not None:
            doc["served"] = self.served
        if self.kind == "email":
            doc.update(sender=self.sender, recipients=list(self.recipients))
        elif self.kind == "api":
            doc.update(
                method=self.method,
                path=self.path,
                status=self.status,
                idempotency_key=self.idempotency_key,
                objects=list(self.objects),
                served_for=self.served_for,
                effect=self.effect,
                replayed=self.replayed,
                echoed=list(self.echoed),
            )
        else:
            doc.update(
                method=self.method,
                path=self.path,
                route=self.route,
                status=self.status,
                idempotency_key=self.idempotency_key,
            )
        return doc


def excerpt_of(body: bytes) -> str:
    """The first bytes of `body` as text, every secret the lab knows redacted."""
    return redact(body[:EXCERPT_BYTES].decode("utf-8", "replace"))


def digest(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()


@dataclass(frozen=True)
class EventKeys:
    """What a sink's ``match`` may name of one event."""

    event_id: str
    order_id: str
    object_id: str

    def fill(self, template: str) -> str:
        values = {"event_id": self.event_id, "order_id": self.order_id, "object_id": self.object_id}
        return re.sub(r"\{\{\s*([a-z_]+)\s*\}\}", lambda m: values.get(m.group(1), m.group(0)), template)


# (event id, object id) -> the event's database effects now; None when the lab reads none.
RowsNow = Callable[[str, str], "int | None"]


@dataclass
class SinkCount:
    """What one sink received for one event, counted as it arrived (never capped).

    ``early``: arrived while the event had no committed row. A message is an effect; a call is one
    unless it only reads (``GET``...): calls with one idempotency key are one effect downstream
    (the API's dedupe), each keyless one an effect of its own; a change the provider's API executed
    is one (it dedupes by key itself: a replay executes nothing). What a sink refused on purpose
    (effect-failure) is no effect."""

    received: int = 0  # every effect message or call, keyed or not
    keyless: int = 0
    keyless_early: int = 0
    keys: set[str] = field(default_factory=set)
    keys_early: set[str] = field(default_factory=set)
    first_keys: list[str | None] = field(default_factory=list)  # the first calls' keys, in arrival order
    refused: int = 0  # messages and effect calls the sink refused on purpose

    def add(self, record: SinkRecord, event_id: str) -> None:
        early = record.rows_at_arrival.get(event_id) == 0
        if record.served in REFUSALS:
            self.refused += record.kind == "email" or (record.method or "").upper() not in READS
            return
        if record.kind == "api":  # the API executed a change, or not
            self.received += record.effect
            self.keyless += record.effect
            self.keyless_early += record.effect and early
            return
        if record.kind == "call" and (record.method or "").upper() in READS:
            return
        self.received += 1
        key = record.idempotency_key
        if len(self.first_keys) < MAX_KEYS_SHOWN:
            self.first_keys.append(key)
        if key is None:
            self.keyless += 1
            self.keyless_early += early
        else:
            self.keys.add(key)
            if early:
                self.keys_early.add(key)

    @property
    def effects(self) -> int:
        return len(self.keys) + self.keyless

    @property
    def before_commit(self) -> int:
        """Effects that arrived while the event had no row (a retried call with one key is one
        effect, before the commit too)."""
        return len(self.keys_early) + self.keyless_early

    def shown_keys(self) -> tuple[str | None, ...]:
        """The first calls' keys in arrival order; when later calls added what they do not show
        (a call without a key, another key), the last slots show that: what is judged of the
        keys is judged from all of them."""
        shown = list(self.first_keys)
        if self.received <= len(shown):
            return tuple(shown)
        if self.keyless and None not in shown:
            shown[-1] = None
        seen = {k for k in shown if k is not None}
        if len(self.keys) > 1 and len(seen) < 2:
            other = min(self.keys - seen)
            shown[-2 if shown[-1] is None else -1] = other
        return tuple(shown)

    def copy(self) -> SinkCount:
        return replace(
            self, keys=set(self.keys), keys_early=set(self.keys_early), first_keys=list(self.first_keys)
        )


@dataclass
class EventCount:
    """Everything the sinks received for one event: each sink's `SinkCount`, by the sink's name."""

    sinks: dict[str, SinkCount] = field(default_factory=dict)

    def add(self, record: SinkRecord, event_id: str) -> None:
        self.sinks.setdefault(record.sink, SinkCount()).add(record, event_id)

    def of(self, sink: str) -> SinkCount:
        return self.sinks.get(sink) or SinkCount()

    @property
    def before_commit(self) -> int:
        return sum(count.before_commit for count in self.sinks.values())

    @property
    def received(self) -> int:
        return sum(count.received for count in self.sinks.values())


class Ledger:
    """The events of the run (registered as trials make them), each one's `EventCount`, and
    every record the sinks keep.

    Shared by the sinks' threads and the lab's loop: one lock guards it."""

    def __init__(self, limits: SinkLimits, rows_now: RowsNow | None = None) -> None:
        self.limits = limits
        self._rows_now = rows_now
        self._lock = threading.Lock()
        self._events: dict[str, EventKeys] = {}
        self._counts: dict[str, EventCount] = {}
        self._records: list[SinkRecord] = []
        self._seq: dict[str, int] = {}  # by sink
        self.dropped: dict[str, int] = {}  # by sink: records past max_records
        self._unread = 0  # records capped or dropped
        self._last_unread: datetime | None = None
        # events whose effects the sinks refuse now (effect-failure), and how: "refuse" or "stall"
        self._failing: dict[str, str] = {}

    def register(self, keys: EventKeys) -> None:
        with self._lock:
            self._events[keys.event_id] = keys

    def matching(self, template: str, text: Text) -> tuple[str, ...]:
        """The registered events whose filled `template` `text` names as a whole identifier."""
        return self.matching_where(lambda keys: text.names(keys.fill(template)))

    def matching_where(self, holds: Callable[[EventKeys], bool]) -> tuple[str, ...]:
        """The registered events for which `holds` is true."""
        with self._lock:
            events = list(self._events.values())
        return tuple(keys.event_id for keys in events if holds(keys))

    def fail(self, event_id: str, how: FailureMode = "refuse") -> None:
        """Refuse the effects of `event_id` from now on (the SMTP server refuses, the API answers
        503); ``stall``: the SMTP server holds its answer to a message until `recover`, then refuses."""
        with self._lock:
            self._failing[event_id] = how

    def recover(self, event_id: str) -> None:
        with self._lock:
            self._failing.pop(event_id, None)

    def refuses(self, events: Iterable[str]) -> bool:
        """Whether a message or call for `events` is refused now."""
        with self._lock:
            return any(e in self._failing for e in events)

    def stalls(self, events: Iterable[str]) -> bool:
        """Whether a message for `events` is held unanswered now (``fail(..., "stall")``)."""
        with self._lock:
            return any(self._failing.get(e) == "stall" for e in events)

    def keys_of(self, event_id: str) -> EventKeys | None:
        with self._lock:
            return self._events.get(event_id)

    def rows_at(self, events: Iterable[str]) -> dict[str, int | None]:
        """Each event's database effects now (read when a message or call arrives)."""
        rows: dict[str, int | None] = {}
        for event_id in events:
            keys = self.keys_of(event_id)
            if self._rows_now is None or keys is None:
                rows[event_id] = None
                continue
            try:
                rows[event_id] = self._rows_now(event_id, keys.object_id)
            except Exception:
                rows[event_id] = None
        return rows

    def next_seq(self, sink: str) -> int:
        with self._lock:
            seq = self._seq.get(sink, 0)
            self._seq[sink] = seq + 1
            return seq

    def keep(self, record: SinkRecord) -> None:
        """Count `record` for its events, and keep it while fewer than ``max_records`` are kept."""
        with self._lock:
            for event_id in record.events:
                self._counts.setdefault(event_id, EventCount()).add(record, event_id)
            full = len(self._records) >= self.limits.max_records
            if full:
                self.dropped[record.sink] = self.dropped.get(record.sink, 0) + 1
            if full or record.capped:
                self._unread += 1
                self._last_unread = datetime.now(UTC)
            if not full:
                self._records.append(record)

    def count(self, event_id: str) -> EventCount:
        """What the sinks received for `event_id` so far (a copy)."""
        with self._lock:
            found = self._counts.get(event_id)
            if found is None:
                return EventCount()
            return EventCount({name: count.copy() for name, count in found.sinks.items()})

    def unread_since(self, moment: datetime) -> int:
        """How many messages or calls the sinks could not keep whole (capped or dropped) in
        all; 0 when none came at or after `moment`."""
        with self._lock:
            if self._last_unread is None or self._last_unread < moment:
                return 0
            return self._unread

    def records(self, sink: str | None = None) -> list[SinkRecord]:
        with self._lock:
            return [r for r in self._records if sink is None or r.sink == sink]


def now_mono() -> float:
    return time.monotonic()
