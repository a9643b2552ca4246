"""What a sink records: one message or call, bounded, secrets redacted, and the events it matched.

A consumer under test talks to the sinks; what it sends is an adversary's input like any
other. So a record keeps a bounded excerpt of the body and the sha256 of every byte
received; a message or a call past `SinkLimits` is cut off and recorded as ``capped``, and
past ``max_records`` the sink stops keeping records (it counts what it dropped). Header
values whose names say credential (``Authorization``, ``X-Api-Key``, ``Cookie``...) are
never kept, and are remembered as secrets, so no writer of the lab prints them elsewhere
(an excerpt that quotes them is redacted too).
"""

from __future__ import annotations

import hashlib
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from acklab.evidence.redaction import REDACTED, redact, remember

SinkKind = Literal["email", "call"]
# A header whose name says credential: its value is a secret of the consumer's.
_SECRET_NAME = re.compile(r"auth|key|token|secret|passw|cookie|signature|credential", re.IGNORECASE)
EXCERPT_BYTES = 2048


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
    """One message the SMTP sink received, or one call the outbound sink answered."""

    kind: SinkKind
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
        if self.kind == "email":
            doc.update(sender=self.sender, recipients=list(self.recipients))
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


class Ledger:
    """The events of the run (registered as trials make them) and every record the sinks keep.

    Shared by the sinks' threads and the lab's loop: one lock guards it."""

    def __init__(self, limits: SinkLimits, rows_now: RowsNow | None = None) -> None:
        self.limits = limits
        self._rows_now = rows_now
        self._lock = threading.Lock()
        self._events: dict[str, EventKeys] = {}
        self._records: list[SinkRecord] = []
        self._seq: dict[SinkKind, int] = {"email": 0, "call": 0}
        self.dropped: dict[SinkKind, int] = {"email": 0, "call": 0}

    def register(self, keys: EventKeys) -> None:
        with self._lock:
            self._events[keys.event_id] = keys

    def matching(self, template: str, haystack: str) -> tuple[str, ...]:
        """The registered events whose filled `template` occurs in `haystack`."""
        with self._lock:
            events = list(self._events.values())
        found = []
        for keys in events:
            needle = keys.fill(template)
            if needle and needle in haystack:
                found.append(keys.event_id)
        return tuple(found)

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

    def next_seq(self, kind: SinkKind) -> int:
        with self._lock:
            seq = self._seq[kind]
            self._seq[kind] = seq + 1
            return seq

    def keep(self, record: SinkRecord) -> None:
        with self._lock:
            if len(self._records) >= self.limits.max_records:
                self.dropped[record.kind] += 1
                return
            self._records.append(record)

    def records(self, kind: SinkKind | None = None) -> list[SinkRecord]:
        with self._lock:
            return [r for r in self._records if kind is None or r.kind == kind]

    def of(self, event_id: str) -> list[SinkRecord]:
        with self._lock:
            return [r for r in self._records if event_id in r.events]


def now_mono() -> float:
    return time.monotonic()
