"""Engines and sessions: SQLite (WAL, busy timeout, BEGIN IMMEDIATE for writes) or PostgreSQL.

Engines are built by ``create_app``, never at import, so every app (and every test) owns
its database.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.exc import ArgumentError, SQLAlchemyError
from sqlalchemy.orm import Session

from acklab.app.errors import ConfigError, DatabaseUnavailable
from acklab.app.models import Base

# A writer waits this long for SQLite's write lock before "database is locked". It must
# exceed the longest simulated processing delay times the number of queued writers.
SQLITE_BUSY_TIMEOUT_MS = 60_000
# Execution option that makes SQLite open the transaction with BEGIN IMMEDIATE.
WRITE_OPTION = "acklab_write"
# A burst of duplicates (16 by default) is served from the pool's kept connections: an overflow
# connection is opened and closed per request, and on PostgreSQL each is a SCRAM handshake that
# spreads the burst out before it reaches the handler.
POOL_SIZE, MAX_OVERFLOW = 20, 20


def create_db_engine(url: str) -> Engine:
    """An engine for ``url`` (sqlite:///... or postgresql[+psycopg]://...); nothing is opened yet."""
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise ConfigError(
            f"got database URL {url!r}; expected sqlite:///path/to.db or postgresql+psycopg://user@host/db"
        ) from None
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        if parsed.database in (None, "", ":memory:"):
            raise ConfigError(
                f"got database URL {url!r}: an in-memory SQLite database is private to one connection; "
                "use a file, e.g. sqlite:////tmp/acklab-fixture.db"
            )
        engine = create_engine(parsed, pool_size=POOL_SIZE, max_overflow=MAX_OVERFLOW)
        event.listen(engine, "connect", _sqlite_on_connect)
        event.listen(engine, "begin", _sqlite_on_begin)
        return engine
    if backend == "postgresql":
        # Only psycopg 3 is installed; a bare postgresql:// would ask for psycopg2.
        parsed = parsed.set(drivername="postgresql+psycopg")
        return create_engine(parsed, pool_size=POOL_SIZE, max_overflow=MAX_OVERFLOW, pool_pre_ping=True)
    raise ConfigError(
        f"got database URL {parsed.render_as_string(hide_password=True)!r} (backend {backend!r}); "
        "expected sqlite:///path/to.db or postgresql+psycopg://user@host/db"
    )


def _sqlite_on_connect(dbapi_connection: Any, _record: Any) -> None:
    # Take BEGIN away from the sqlite3 driver (which skips it before SELECTs) so that
    # _sqlite_on_begin decides how each transaction starts.
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute("PRAGMA journal_mode=WAL")  # readers never block the writer, nor it them
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA foreign_keys=ON")
    finally:
        cursor.close()


def _sqlite_on_begin(conn: Connection) -> None:
    # A write transaction takes the write lock up front: concurrent deliveries queue on
    # busy_timeout instead of failing with SQLITE_BUSY when a reader upgrades to a writer.
    immediate = conn.get_execution_options().get(WRITE_OPTION, False)
    conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")


def prepare_database(engine: Engine) -> None:
    """Open the database once and create the tables; ``DatabaseUnavailable`` if it cannot."""
    try:
        Base.metadata.create_all(engine)
    except SQLAlchemyError as exc:
        where = engine.url.render_as_string(hide_password=True)
        raise DatabaseUnavailable(
            f"cannot open or prepare the database {where!r}: {exc.__class__.__name__}: {getattr(exc, 'orig', exc)}"
        ) from exc


@contextmanager
def write_session(engine: Engine) -> Iterator[Session]:
    """A session whose transaction is a write transaction from its first statement.

    The caller commits; leaving the block without a commit rolls back.
    """
    with Session(engine, expire_on_commit=False) as session:
        session.connection(execution_options={WRITE_OPTION: True})
        yield session


def insert_for(session: Session, model: type[Base]) -> postgresql.Insert | sqlite.Insert:
    """An INSERT for ``model`` in the session's dialect, so ``on_conflict_do_*`` is available."""
    if session.get_bind().dialect.name == "postgresql":
        return postgresql.insert(model)
    return sqlite.insert(model)
