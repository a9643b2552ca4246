"""Finding a service's effect table by watching its database: one signed event, then a duplicate.

`discover` reads every table of the service's database (read-only, `harness.targets.effects`:
the same connection the lab counts with), delivers one signed event, waits until the
database is quiet, reads it again, delivers the very same event again (a retry: same bytes,
signed anew), reads again, and finally sends a conflicting body under the same id to see
how the service answers one. What changed is compared row by row:

* a table that gained rows holding the event id (or the event's object id) is a candidate
  effect table, and the column holding it is what the count query filters on;
* candidates are ranked: a table that grew again on the duplicate is an effect the
  service does not dedupe (the bug acklab will report), one whose name says it records
  deliveries (``processed_events``, ``claims``, ``webhook_events``...) is bookkeeping, and a
  table that stores more of the event (amounts, names) is more likely the effect;
* the state query reads the columns of the effect row whose values came from the body.

Nothing is written to the database by the lab, and what init reads of it and of the service is
bounded, whatever their size: rows are streamed, up to `MAX_ROWS` a table and `MAX_READ_BYTES`
of values a read (smaller tables first; a table past either is compared by its count only, and
says so); a value longer than `MAX_VALUE` is kept as its beginning and the digest of all of it
(`Clipped`); the service's answer is read up to `ANSWER_BYTES`. Names the database gives
(tables, columns) are the service's data: what shows them escapes them (`shown`).
"""

from __future__ import annotations

import hashlib
import re
import secrets
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import httpx
from sqlalchemy import inspect, text
from sqlalchemy.engine import Connection, Engine, make_url
from sqlalchemy.exc import SQLAlchemyError

from acklab.evidence.history import printable
from acklab.evidence.redaction import redact
from acklab.harness.errors import ProbeError, TargetUnreachable
from acklab.harness.targets.effects import read_only_engine
from acklab.harness.wire.providers import event_type_header
from acklab.harness.wire.signing import SIGNERS, Attempt
from acklab.harness.wire.templates import WebhookEvent, conflicting, render
from acklab.harness.wire.transports import tls

MAX_ROWS = 5000
MAX_VALUE = 512  # characters (or bytes) of one value kept whole
MAX_READ_BYTES = 16 << 20  # of values kept by one read of the database
ANSWER_BYTES = 4096  # of the service's answer to a delivery
QUIET_S = 1.0  # the database reads the same for this long: the handler is done
POLL_S = 0.2
BOOKKEEPING = re.compile(
    r"claim|processed|seen|dedup|idempot|inbox|receipt|webhook|delivery|deliveries|received|event_log|events?$",
    re.IGNORECASE,
)
Row = tuple[Any, ...]


def shown(name: str) -> str:
    """A name the database gave, safe on a terminal and in a comment line (controls, line breaks
    and format characters escaped)."""
    return printable(name)


@dataclass(frozen=True)
class Clipped:
    """A value longer than `MAX_VALUE`, as init keeps it: its beginning, its length and the
    sha256 of all of it (two such values are equal when all of them is)."""

    head: str | bytes
    size: int
    sha256: str


def kept(value: Any) -> Any:
    """`value` as a snapshot keeps it (a long text or blob `Clipped`)."""
    if isinstance(value, memoryview | bytearray):
        value = bytes(value)
    if isinstance(value, str) and len(value) > MAX_VALUE:
        return Clipped(
            value[:MAX_VALUE], len(value), hashlib.sha256(value.encode("utf-8", "replace")).hexdigest()
        )
    if isinstance(value, bytes) and len(value) > MAX_VALUE:
        return Clipped(value[:MAX_VALUE], len(value), hashlib.sha256(value).hexdigest())
    return value


def _weight(value: Any) -> int:
    """Roughly what keeping `value` costs, in bytes."""
    if isinstance(value, Clipped):
        return len(value.head) + 100
    if isinstance(value, str | bytes):
        return len(value) + 50
    return 32


@dataclass(frozen=True)
class Table:
    """One table as read: its columns, its row count, its rows (None: too many to compare)."""

    name: str
    columns: tuple[str, ...]
    count: int
    rows: Counter[Row] | None


Snapshot = dict[str, Table]


@dataclass(frozen=True)
class Change:
    """What one delivery changed in one table."""

    table: str
    columns: tuple[str, ...]
    before: int
    after: int
    added: tuple[Row, ...] = ()
    removed: tuple[Row, ...] = ()
    rows_compared: bool = True

    def describe(self) -> str:
        delta = self.after - self.before
        rows = "" if self.rows_compared else " (too large to read whole: compared by count only)"
        return f"{shown(self.table)}: {self.before} -> {self.after} rows ({delta:+d}){rows}"


@dataclass(frozen=True)
class Candidate:
    """A table that may hold the effect, the column that names the event in it, and why."""

    table: str
    column: str
    keyed_by: str  # "event" (the column holds the event id) or "object" (the object id)
    grew_on_duplicate: bool
    state_columns: tuple[str, ...]
    score: int
    reasons: tuple[str, ...]


@dataclass(frozen=True)
class Discovery:
    """What the deliveries did: statuses, the changes after each, the ranked candidates."""

    event_id: str
    object_id: str
    statuses: tuple[int | None, int | None, int | None]  # event, duplicate, conflicting body
    first: tuple[Change, ...]
    duplicate: tuple[Change, ...]
    conflict: tuple[Change, ...]
    candidates: tuple[Candidate, ...] = field(default=())

    @property
    def best(self) -> Candidate | None:
        return self.candidates[0] if self.candidates else None


class Deliverer:
    """Signs and sends one event's deliveries to the service, as its provider would."""

    def __init__(
        self, url: str, scheme: str, secret: str, *, event_type: str | None, headers: Mapping[str, str]
    ):
        self.url, self.scheme, self.secret, self.event_type = url, scheme, secret, event_type
        self.headers = dict(headers)
        self._client = httpx.Client(timeout=30.0, trust_env=False, verify=tls())

    def send(self, event: WebhookEvent) -> tuple[int | None, str]:
        attempt = Attempt(
            event_id=event.event_id,
            event_type=event_type_header(self.scheme, self.event_type, event.document),
            body=event.body,
            timestamp=int(time.time()),
            request_uuid=secrets.token_hex(16),
            triggered_at=event.created_at,
        )
        headers = {"Content-Type": "application/json", **self.headers}
        headers.update(SIGNERS[self.scheme].headers(attempt, self.secret))
        try:
            # Streamed, and read no further than ANSWER_BYTES (undecoded: no compression bomb):
            # init shows the start of the answer, never holds all of it.
            with self._client.stream("POST", self.url, content=event.body, headers=headers) as answer:
                start = bytearray()
                for chunk in answer.iter_raw():
                    start += chunk
                    if len(start) >= ANSWER_BYTES:
                        break
        except httpx.HTTPError as exc:
            raise TargetUnreachable(
                f"the service at {redact(self.url)} did not answer the delivery: {type(exc).__name__}: "
                f"{redact(str(exc))}; is it running, and is --url its webhook endpoint?"
            ) from exc
        return answer.status_code, shown(redact(bytes(start[:300]).decode("utf-8", "replace")))

    def close(self) -> None:
        self._client.close()


class Database:
    """The service's database, read-only: every table's count and rows."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._engine: Engine = read_only_engine(make_url(url))

    def snapshot(self) -> Snapshot:
        try:
            names = inspect(self._engine).get_table_names()
            quote = self._engine.dialect.identifier_preparer.quote
            found: Snapshot = {}
            with self._engine.connect() as conn:
                # Table names come from the database itself, quoted by its dialect; the connection
                # is read-only (harness.targets.effects).
                counts = {
                    name: int(conn.execute(text(f"SELECT count(*) FROM {quote(name)}")).scalar() or 0)  # noqa: S608  # nosec B608
                    for name in names
                }
                budget = MAX_READ_BYTES
                # Smaller tables first: an effect table is rarely the database's largest.
                for name in sorted(names, key=lambda n: (counts[n], n)):
                    columns, rows, budget = self._rows(conn, quote(name), counts[name], budget)
                    found[name] = Table(name, columns, counts[name], rows)
                conn.rollback()
        except SQLAlchemyError as exc:
            raise ProbeError(
                f"cannot read the service's database ({redact(make_url(self.url).render_as_string(hide_password=True))}): "
                f"{redact(str(getattr(exc, 'orig', exc)))}; check --db"
            ) from exc
        return found

    @staticmethod
    def _rows(
        conn: Connection, table: str, count: int, budget: int
    ) -> tuple[tuple[str, ...], Counter[Row] | None, int]:
        """`table`'s columns and rows (None: past `MAX_ROWS` or the `budget` left), streamed;
        and the budget left after them."""
        query = text(f"SELECT * FROM {table} LIMIT {MAX_ROWS + 1}")  # noqa: S608  # nosec B608
        result = conn.execute(query.execution_options(stream_results=True, max_row_buffer=100))
        columns = tuple(result.keys())
        rows: Counter[Row] | None = None
        if count <= MAX_ROWS:
            rows = Counter()
            for n, row in enumerate(result):
                values = tuple(kept(v) for v in row)
                budget -= sum(map(_weight, values))
                if budget < 0 or n >= MAX_ROWS:
                    rows = None
                    break
                rows[values] += 1
        result.close()
        return columns, rows, max(budget, 0)

    def close(self) -> None:
        self._engine.dispose()


def changes(before: Snapshot, after: Snapshot) -> tuple[Change, ...]:
    """Every table whose count or rows differ between two snapshots."""
    found = []
    for name in sorted(set(before) | set(after)):
        old, new = before.get(name), after.get(name)
        table = new or old
        columns = table.columns if table is not None else ()
        old_count, new_count = (old.count if old else 0), (new.count if new else 0)
        if old and new and old.rows is not None and new.rows is not None:
            added = tuple((new.rows - old.rows).elements())
            removed = tuple((old.rows - new.rows).elements())
            if added or removed or old_count != new_count:
                found.append(Change(name, columns, old_count, new_count, added, removed))
        elif old_count != new_count or (old is None) != (new is None):
            added = tuple(new.rows.elements()) if new and new.rows is not None and old is None else ()
            found.append(Change(name, columns, old_count, new_count, added, rows_compared=False))
    return tuple(found)


def settled(database: Database, since: Snapshot, *, wait_s: float, expect_change: bool) -> Snapshot:
    """The database once it has read the same for `QUIET_S` (after a first change, when one is
    expected, up to `wait_s`: an ack-then-process consumer writes after it answered)."""
    deadline = time.monotonic() + wait_s
    last = database.snapshot()
    quiet_since = time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(POLL_S)
        now = database.snapshot()
        if now != last:
            last, quiet_since = now, time.monotonic()
            continue
        changed = bool(changes(since, now))
        if time.monotonic() - quiet_since >= QUIET_S and (changed or not expect_change):
            break
    return last


def _holds(value: Any, wanted: str) -> bool:
    if isinstance(value, Clipped) and isinstance(value.head, str):
        return wanted in value.head
    return isinstance(value, str) and (value == wanted or wanted in value)


def _body_values(document: Any) -> set[Any]:
    found: set[Any] = set()
    if isinstance(document, Mapping):
        for value in document.values():
            found |= _body_values(value)
    elif isinstance(document, list):
        for value in document:
            found |= _body_values(value)
    elif isinstance(document, str | int | float) and not isinstance(document, bool):
        found.add(document)
        if isinstance(document, str) and re.fullmatch(r"-?\d+(\.\d+)?", document):
            found.add(float(document))
    return found


def rank(
    first: Sequence[Change], duplicate: Sequence[Change], *, event_id: str, object_id: str, body: Any
) -> tuple[Candidate, ...]:
    """The candidate effect tables, best first (see the module docstring)."""
    grew_again = {c.table for c in duplicate if c.after > c.before}
    values = _body_values(body)
    found = [
        candidate
        for change in first
        if change.added
        and (candidate := _candidate(change, change.table in grew_again, event_id, object_id, values))
    ]
    return tuple(sorted(found, key=lambda c: (-c.score, c.table)))


def _columns_holding(change: Change, wanted: str) -> list[str]:
    """The columns of `change`'s new rows that hold `wanted` in one of them."""
    return [c for i, c in enumerate(change.columns) if any(_holds(row[i], wanted) for row in change.added)]


def _state_columns(change: Change, keys: set[str], values: set[Any]) -> tuple[str, ...]:
    """The columns, besides the keys, whose new rows hold a value of the event's body."""

    def from_body(value: Any) -> bool:
        return value in values or (isinstance(value, int | float) and float(value) in values)

    return tuple(
        c
        for i, c in enumerate(change.columns)
        if c not in keys
        and any(from_body(row[i]) for row in change.added)
        and not isinstance(change.added[0][i], bool)
        and c.lower() != "id"  # the row's own key: a number the body may hold by chance
    )


def _candidate(
    change: Change, grew_again: bool, event_id: str, object_id: str, values: set[Any]
) -> Candidate | None:
    """`change`'s table as a candidate, scored; None when its new rows name neither id."""
    by_event = _columns_holding(change, event_id)
    by_object = _columns_holding(change, object_id)
    if not by_event and not by_object:
        return None
    keyed_by, column = ("event", by_event[0]) if by_event else ("object", by_object[0])
    keys = set(by_event) | set(by_object)
    state = _state_columns(change, keys, values)
    payload = [c for c in change.columns if c not in keys and c.lower() != "id"]
    score, reasons = 0, []
    if grew_again:
        score += 100
        reasons.append("it grew again on the duplicate: an effect the service does not dedupe")
    elif BOOKKEEPING.search(change.table):
        score -= 10
        reasons.append("its name says it records deliveries (bookkeeping, not the effect)")
    score += min(len(payload), 5) + 2 * len(state)
    if by_object:
        score += 2
        reasons.append("it names the event's object")
    if state:
        reasons.append(f"it stores {', '.join(state)} from the event")
    return Candidate(change.table, column, keyed_by, grew_again, state, score, tuple(reasons))


def fresh_ids() -> tuple[str, str]:
    """The discovery event's id and its object's: fresh, so nothing of an earlier init meets them."""
    token = secrets.token_hex(8)
    return f"evt_init{token}", f"ord_init{token}"


def refused_at_once(status: int | None, answer: str, *, url: str, event_type: str, log_tail: str) -> None:
    """A first answer that says the lab cannot learn anything from waiting: no route (404, 405) or
    the handler failed (5xx). Raised at once, with the service's own log when init serves it."""
    if status in (404, 405):
        raise TargetUnreachable(
            f"the service answered {status} to the signed event at {redact(url)}: no route takes a POST "
            "there; check the webhook's path (--path, or --url) against the app's routes (Django: urls.py, "
            "Flask: @app.route, FastAPI: @app.post)"
        )
    if status is not None and status >= 500:
        where = (
            f"the service's log ends with:\n{redact(log_tail)}"
            if log_tail.strip()
            else f"its answer began {answer[:200]!r}; the traceback is in the service's own log"
        )
        raise TargetUnreachable(
            f"the service answered {status} to the signed {event_type} event: its handler failed on it, "
            f"so init cannot see what it writes. {where}\nIf the provider's example lacks fields your "
            "handler reads, pass one of your own events with --example FILE"
        )


def discover(
    database: Database,
    deliverer: Deliverer,
    template: Mapping[str, Any],
    *,
    conflict_set: Mapping[str, Any],
    wait_s: float,
    say: Callable[[str], None],
    ids: tuple[str, str] | None = None,
    mark: Callable[[str], None] = lambda phase: None,
    log_tail: Callable[[], str] = lambda: "",
    event_type: str = "",
) -> Discovery:
    """Deliver one event, its duplicate and a conflicting body; see what each changed.

    `mark(phase)` is called before each delivery (``event``, ``duplicate``, ``conflict``) and
    once they are settled (``end``): the sinks' records between two marks are that delivery's.
    A first answer of 404, 405 or 5xx ends discovery at once (`refused_at_once`)."""
    event_id, object_id = ids or fresh_ids()
    event = render(template, event_id=event_id, order_id=object_id, seq=1, created=datetime.now(UTC))
    # Each change is taken as soon as both of its reads are done: no more than two reads of the
    # database are held at once.
    before = database.snapshot()
    say(f"read {len(before)} table(s) of the database; delivering event {event_id}")
    mark("event")
    first_status, first_answer = deliverer.send(event)
    say(f"  the event: answered {first_status} {first_answer[:120]!r}")
    refused_at_once(first_status, first_answer, url=deliverer.url, event_type=event_type, log_tail=log_tail())
    after = settled(database, before, wait_s=wait_s, expect_change=True)
    first = changes(before, after)
    say("  then the duplicate (the same event, signed again, as a retry)")
    mark("duplicate")
    dup_status, _ = deliverer.send(event)
    before, after = after, settled(database, after, wait_s=wait_s, expect_change=False)
    duplicate = changes(before, after)
    twin = conflicting(event, conflict_set)
    say(f"  then a conflicting body under the same id ({', '.join(conflict_set)} changed)")
    mark("conflict")
    conflict_status, _ = deliverer.send(twin)
    before, after = after, settled(database, after, wait_s=wait_s, expect_change=False)
    conflict = changes(before, after)
    mark("end")
    return Discovery(
        event_id=event_id,
        object_id=object_id,
        statuses=(first_status, dup_status, conflict_status),
        first=first,
        duplicate=duplicate,
        conflict=conflict,
        candidates=rank(first, duplicate, event_id=event_id, object_id=object_id, body=event.document),
    )
