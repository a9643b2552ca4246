"""Effects probes: count one event's side effects, read back from the target itself.

* `SqlProbe`: a SQL query run with SQLAlchemy against the target's own database
  (``:event_id`` is bound, never interpolated), on a read-only connection: the query is
  the spec author's text and the database is the target's, so it must not be able to
  change a byte. SQLite is opened with ``mode=ro``, ``PRAGMA query_only`` and an
  authorizer that allows reading only (``ATTACH`` would create a file, a ``PRAGMA`` could
  lift ``query_only``); PostgreSQL sessions default to read-only
  (``default_transaction_read_only``) and every transaction is ``READ ONLY``. A query
  that tries to write is a spec error (exit 3); other backends are refused.
  The count names base tables only: a read through a view is refused (exit 3) — SQLite's
  authorizer names the view a read comes through, PostgreSQL locks every relation a query
  names (views included) until the transaction ends, and the probe reads those locks.
* `HttpProbe`: a GET to an effects endpoint, with the spec's headers (an API key), the
  count at a dotted JSON path (the fixture's ``/events/{event_id}/effects`` is one).

Both turn library errors into `ProbeError` (exit 4): an unreadable count is a lab
failure, never a zero. Messages name the URL as the spec does (``env:NAME`` when it came
from the environment) and go through the process's redaction: library messages quote
URLs.
"""

from __future__ import annotations

import asyncio
import re
import sqlite3
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol, TypeVar, cast
from urllib.parse import quote

import httpx
from sqlalchemy import create_engine, text
from sqlalchemy.engine import URL, Connection, Engine, make_url
from sqlalchemy.exc import ArgumentError, SQLAlchemyError
from sqlalchemy.pool import QueuePool

from acklab.evidence.documents.records import ObservationSource
from acklab.evidence.extras import require
from acklab.evidence.loading import DocumentError, Limits, parse_json
from acklab.evidence.redaction import redact
from acklab.harness.errors import ProbeError, SpecError
from acklab.harness.targets.read_engine import ReadEngine
from acklab.harness.wire.bodies import read_capped
from acklab.harness.wire.transports import tls

T = TypeVar("T")
# An effects endpoint answers a small JSON object; more is refused, not buffered.
PROBE_LIMITS = Limits(max_bytes=1 << 20, max_depth=32)
# What a read-only SQLite connection may do: read tables, call functions, recurse (CTEs).
_SQLITE_READING = frozenset(
    {
        sqlite3.SQLITE_SELECT,
        sqlite3.SQLITE_READ,
        sqlite3.SQLITE_FUNCTION,
        sqlite3.SQLITE_RECURSIVE,
        sqlite3.SQLITE_TRANSACTION,  # BEGIN/ROLLBACK: one snapshot for a pinned schema and its count
    }
)
# A query or URL that reads an object: count and state are then the object's (lifecycle.object).
OBJECT_PARAMETER = re.compile(r":object_id\b")
OBJECT_PLACEHOLDER = re.compile(r"\{\{\s*object_id\s*\}\}")


def keys(event_id: str, object_id: str | None) -> dict[str, str]:
    """The parameters a count or state query gets: ``:event_id`` and ``:object_id`` (by default the
    event's own id)."""
    return {"event_id": event_id, "object_id": event_id if object_id is None else object_id}


def fill_keys(template: str, event_id: str, object_id: str | None) -> str:
    """An effects URL with ``{{event_id}}`` and ``{{object_id}}`` filled."""
    filled = keys(event_id, object_id)
    return OBJECT_PLACEHOLDER.sub(filled["object_id"], template.replace("{{event_id}}", event_id))


RELATION_KINDS = {"r": "table", "p": "table", "v": "view", "m": "materialized view", "i": "index",
                  "I": "index", "S": "sequence", "": "foreign table", "c": "type"}  # fmt: skip
# How the databases say a statement tried to write (or to reach beyond the database).
_WRITE_REFUSED = ("readonly database", "read-only transaction", "not authorized", "read_only_sql_transaction")


class EffectsProbe(Protocol):
    """Counts the side effects of one event (or of its object: `by_object`)."""

    source: ObservationSource  # the observation's source

    @property
    def by_object(self) -> bool:
        """Whether the count is of the event's object (``:object_id``), not of the event alone."""
        ...

    async def count(self, event_id: str, object_id: str | None = None) -> int: ...

    async def aclose(self) -> None: ...


def as_count(value: Any, where: str) -> int:
    """`value` as a count of effects; ProbeError naming `where` when it is not one."""
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0 or int(value) != value:
        raise ProbeError(f"{where} gave {value!r}; expected a non-negative integer count")
    return int(value)


def database_kind(url: str) -> str:
    try:
        return make_url(url).get_backend_name()
    except ArgumentError:
        return "unknown"


# Pragmas that only read, asked without a value (SQLAlchemy reads read_uncommitted on connect).
_SQLITE_READ_PRAGMAS = frozenset(
    {
        "read_uncommitted",
        "query_only",
        "data_version",
        "user_version",
        "schema_version",
        "table_info",
        "table_xinfo",
    }
)


class _ViewAwareConnection(sqlite3.Connection):
    """A read-only connection that remembers the views its reads came through (refused) and the
    tables it read (a pinned count checks their integrity)."""

    views_read: list[str]
    tables_read: set[str]


def _sqlite_authorizer(
    action: int, arg1: str | None, arg2: str | None, _db: str | None = None, source: str | None = None
) -> int:
    if action == sqlite3.SQLITE_READ and source is not None:
        return sqlite3.SQLITE_DENY  # a read through a view (or a trigger): the count names base tables
    if action in _SQLITE_READING:
        return sqlite3.SQLITE_OK
    if action == sqlite3.SQLITE_PRAGMA and arg2 is None and (arg1 or "").lower() in _SQLITE_READ_PRAGMAS:
        return sqlite3.SQLITE_OK
    if action == sqlite3.SQLITE_PRAGMA and (arg1 or "").lower() == "integrity_check":
        return sqlite3.SQLITE_OK  # reads every page of a table and its indexes; writes nothing
    return sqlite3.SQLITE_DENY


def _read_only_sqlite(url: URL) -> Engine:
    """An engine whose every connection opens the file read-only and may only read."""
    database = url.database or ""
    if not database or database == ":memory:" or database.startswith("file:"):
        raise SpecError(
            f"effects.sql.url: got SQLite database {database or '(in memory)'!r}; expected the path of the "
            "target's database file, e.g. sqlite:////srv/shop/shop.db"
        )
    path = Path(database).absolute()
    uri = f"file:{quote(str(path))}?mode=ro"

    def connect() -> sqlite3.Connection:
        conn = sqlite3.connect(
            uri, uri=True, check_same_thread=False, timeout=5.0, factory=_ViewAwareConnection
        )
        conn.views_read = []
        conn.tables_read = set()

        def authorize(
            action: int, arg1: str | None, arg2: str | None, db: str | None, source: str | None
        ) -> int:
            verdict = _sqlite_authorizer(action, arg1, arg2, db, source)
            if action == sqlite3.SQLITE_READ and arg1 and db == "main" and verdict == sqlite3.SQLITE_OK:
                conn.tables_read.add(arg1)
            if verdict == sqlite3.SQLITE_DENY and action == sqlite3.SQLITE_READ and source is not None:
                conn.views_read.append(source)
            return verdict

        conn.execute("PRAGMA query_only = 1")
        conn.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
        conn.set_authorizer(authorize)  # last: it would refuse the pragma above
        return conn

    # A queue of connections, not SQLAlchemy's default for "sqlite://" (SingletonThreadPool,
    # one per thread): past five threads that pool closes connections other threads still
    # use, and concurrent reads (the end-of-run re-read, a replay's events) crash the process.
    return create_engine("sqlite://", creator=connect, poolclass=QueuePool, pool_size=5, max_overflow=10)


def read_only_engine(url: URL) -> Engine:
    """An engine on the target's database that can only read (SQLite or PostgreSQL)."""
    if url.get_backend_name() == "sqlite":
        return _read_only_sqlite(url)
    return _read_only_postgres(url)


def _read_only_postgres(url: URL) -> Engine:
    """An engine whose sessions default to read-only and whose every transaction is READ ONLY."""
    require("postgres", "psycopg", "effects read from a PostgreSQL database")
    if url.drivername == "postgresql":
        url = url.set(drivername="postgresql+psycopg")  # psycopg 3 is the installed driver
    return create_engine(
        url,
        pool_pre_ping=True,
        connect_args={"options": "-c default_transaction_read_only=on"},
        execution_options={"postgresql_readonly": True},
    )


class SqlProbe:
    """``effects.sql``: `query` with ``:event_id`` bound, on a read-only connection to the target's database."""

    source: ObservationSource = "sql"

    def __init__(self, url: str, query: str) -> None:
        try:
            parsed = make_url(url)
        except ArgumentError as exc:
            raise SpecError(
                "effects.sql.url: not a SQLAlchemy URL; expected e.g. sqlite:////tmp/shop.db"
            ) from exc
        backend = parsed.get_backend_name()
        if backend not in ("sqlite", "postgresql"):
            raise SpecError(
                f"effects.sql.url: got a {backend!r} URL; acklab reads effects from SQLite or PostgreSQL only "
                "(on a read-only connection)"
            )
        self._url = parsed
        self._label = redact(parsed.render_as_string(hide_password=True))
        self._query = text(query)
        self.by_object = OBJECT_PARAMETER.search(query) is not None
        self._reads = ReadEngine(self._make_engine, self._label)

    def _make_engine(self) -> Engine:
        return read_only_engine(self._url)

    def same_database(self, url: str) -> bool:
        """Whether `url` names the database this probe counts in (so one transaction can read both)."""
        try:
            return make_url(url) == self._url
        except ArgumentError:
            return False

    def _count(
        self, event_id: str, object_id: str | None = None, also: Callable[[Connection], T] | None = None
    ) -> tuple[int, T | None]:
        views: list[str] = []
        extra: T | None = None
        try:
            with self._reads.connect() as conn:
                raw = conn.connection.dbapi_connection
                views = getattr(raw, "views_read", [])
                views.clear()
                if also is not None:
                    begin_snapshot(conn)  # the count and `also` see one committed state
                value = self._read(conn, event_id, object_id)
                if also is not None:
                    extra = also(conn)
                conn.rollback()  # a read leaves nothing to keep
        except SQLAlchemyError as exc:
            if views:
                raise SpecError(_through_views(sorted(set(views)))) from exc
            reason = redact(f"{type(exc).__name__}: {getattr(exc, 'orig', exc)}".split("\n[SQL:")[0])
            if any(marker in reason.lower() for marker in _WRITE_REFUSED):
                raise SpecError(
                    "effects.sql.count tried to change the database or reach beyond it, and the read-only "
                    f"connection refused it ({reason}); the count runs read-only: make it one query that "
                    "only reads, e.g. a count(*) of the effects table filtered by event_id = :event_id"
                ) from exc
            raise ProbeError(
                f"effects query on {self._label} failed: {reason}; check effects.sql.url and effects.sql.count"
            ) from exc
        return as_count(value, "effects.sql.count"), extra

    def _read(self, conn: Connection, event_id: str, object_id: str | None = None) -> Any:
        """The query's value on `conn`; refused when it read through a view."""
        value = conn.execute(self._query, keys(event_id, object_id)).scalar()
        if conn.dialect.name == "postgresql":
            views = pg_views_read(conn)
            if views:
                raise SpecError(_through_views(views))
        return value

    async def count(self, event_id: str, object_id: str | None = None) -> int:
        return (await asyncio.to_thread(self._count, event_id, object_id))[0]

    async def count_with(
        self, event_id: str, object_id: str | None, also: Callable[[Connection], T]
    ) -> tuple[int, T]:
        """The count and `also`'s read (the state query, say) in one read-only transaction."""
        effects, extra = await asyncio.to_thread(self._count, event_id, object_id, also)
        return effects, cast("T", extra)  # `also` ran: its value

    def count_now(self, event_id: str, object_id: str | None = None) -> int:
        """The count, read in the caller's thread (a sink's, the moment a message arrives)."""
        return self._count(event_id, object_id)[0]

    async def aclose(self) -> None:
        """Close every connection, once each read in flight returned its own (`ReadEngine`)."""
        await asyncio.to_thread(self._reads.close)


def begin_snapshot(conn: Connection) -> None:
    """Make every read of `conn`'s transaction see one committed state: SQLite's BEGIN (one
    snapshot under WAL, a shared lock otherwise; idempotent), PostgreSQL's REPEATABLE READ
    (before the transaction's first query)."""
    if conn.dialect.name == "sqlite":
        if not conn.connection.dbapi_connection.in_transaction:  # type: ignore[union-attr]
            conn.exec_driver_sql("BEGIN")
    elif conn.dialect.name == "postgresql":
        conn.exec_driver_sql("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")


def _through_views(views: list[str]) -> str:
    return (
        f"effects.sql.count reads through {', '.join(views)}; a count names base tables only (a view can "
        "show the lab other rows than the handler wrote): count the effects table itself"
    )


def pg_views_read(conn: Connection) -> list[str]:
    """Relations other than tables this PostgreSQL transaction has read (views, foreign tables):
    every relation a query names is locked by it, views included, until the transaction ends."""
    rows = conn.exec_driver_sql(
        "SELECT DISTINCT c.relkind, c.relname FROM pg_locks l JOIN pg_class c ON c.oid = l.relation "
        "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE l.pid = pg_backend_pid() "
        "AND l.locktype = 'relation' AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg\\_toast%%' AND n.nspname NOT LIKE 'pg\\_temp\\_%%' AND c.relkind NOT IN ('r', 'p', 'i', 'I', 'S')"
    )
    return sorted(f"{RELATION_KINDS.get(str(kind), str(kind))} {name}" for kind, name in rows)


class HttpProbe:
    """``effects.http``: GET `url_template` (``{{event_id}}`` filled) with `headers`, read `json_path`."""

    def __init__(
        self,
        url_template: str,
        json_path: str,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        source: ObservationSource = "http",
        headers: Mapping[str, str] | None = None,
        shown: str | None = None,
    ) -> None:
        self._template, self._path, self.source = url_template, json_path, source
        self.by_object = OBJECT_PLACEHOLDER.search(url_template) is not None
        # How messages name the URL: the spec's env:NAME when it came from the environment.
        self._shown = shown or url_template
        # The probe has a transport of its own: it must never go through a fault.
        self._client = httpx.AsyncClient(
            transport=transport or httpx.AsyncHTTPTransport(retries=0, verify=tls()),
            timeout=10.0,
            trust_env=False,
            headers=dict(headers or {}),
        )

    def _where(self, event_id: str, object_id: str | None = None) -> str:
        return redact(f"GET {fill_keys(self._shown, event_id, object_id)}")

    async def count(self, event_id: str, object_id: str | None = None) -> int:
        url = fill_keys(self._template, event_id, object_id)
        try:
            async with self._client.stream("GET", url) as response:
                if response.status_code >= 400:
                    raise ProbeError(
                        f"effects probe {self._where(event_id, object_id)} answered {response.status_code}; "
                        "check effects.http.url and effects.http.headers"
                    )
                # The target answers: read it bounded, never a body it chose to make huge.
                body = await read_capped(response, PROBE_LIMITS.max_bytes)
        except httpx.HTTPError as exc:
            # httpx's messages may quote the URL (and its token): named as the spec names it.
            raise ProbeError(
                f"effects probe {self._where(event_id, object_id)} failed: {type(exc).__name__}: {redact(str(exc))}"
            ) from exc
        if body.truncated:
            raise ProbeError(
                f"effects probe {self._where(event_id, object_id)} answered more than {PROBE_LIMITS.describe_size()}; "
                "an effects endpoint answers a small JSON object"
            )
        try:
            value: Any = parse_json(
                body.data, source=f"effects probe {self._where(event_id, object_id)}", limits=PROBE_LIMITS
            )
        except DocumentError as exc:
            raise ProbeError(f"{exc.source} did not answer readable JSON: {exc.problem}") from exc
        for part in self._path.split("."):
            if not isinstance(value, dict) or part not in value:
                raise ProbeError(
                    f"effects probe {self._where(event_id, object_id)}: no {self._path!r} in the answer; "
                    "check effects.http.json_path"
                )
            value = value[part]
        return as_count(value, f"effects probe {self._where(event_id, object_id)} at {self._path!r}")

    async def aclose(self) -> None:
        await self._client.aclose()
