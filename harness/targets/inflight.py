"""Seeing, from outside, that a handler is inside its open transaction.

Crash-mid-transaction and the mid-transaction database faults must strike while the
handler's transaction is open and not yet committed. Rather than guessing with a sleep,
the lab asks the database itself, on a connection of its own (never through the proxy):

* PostgreSQL: a backend of the target's database is ``idle in transaction`` (the handler
  ran its statements and is working before COMMIT);
* SQLite: the write lock is held (the fixture opens writes with ``BEGIN IMMEDIATE``), so
  a ``BEGIN IMMEDIATE`` of ours fails at once with "database is locked".
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from typing import Any

from sqlalchemy.engine import make_url

from acklab.evidence.extras import require
from acklab.harness.errors import HarnessError, SpecError

POLL_S = 0.005


def _pg_conninfo(url: str) -> dict[str, object]:
    parsed = make_url(url)
    info: dict[str, object] = {
        "host": parsed.host or "127.0.0.1",
        "port": parsed.port or 5432,
        "dbname": parsed.database or "postgres",
        "user": parsed.username or "postgres",
        "connect_timeout": 5,
        "autocommit": True,
    }
    if parsed.password:
        info["password"] = parsed.password
    return info


async def _pg_in_transaction(psycopg: Any, url: str, deadline: float, quiet_for_s: float) -> bool:
    # Idle in transaction for a while, not between two statements: the handler is working
    # before its COMMIT, and a strike now hits the COMMIT itself.
    query = (
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
        "AND state = 'idle in transaction' AND pid <> pg_backend_pid() "
        "AND clock_timestamp() - state_change >= make_interval(secs => %s)"
    )
    async with await psycopg.AsyncConnection.connect(**_pg_conninfo(url)) as conn:
        while time.monotonic() < deadline:
            row = await (await conn.execute(query, (quiet_for_s,))).fetchone()
            if row and row[0]:
                return True
            await asyncio.sleep(POLL_S)
    return False


def _sqlite_locked(path: str) -> bool:
    conn = sqlite3.connect(path, timeout=0, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError as exc:
        # SQLITE_BUSY / SQLITE_LOCKED (and their extended codes): another connection holds a write.
        return exc.sqlite_errorcode & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
    else:
        conn.execute("ROLLBACK")
        return False
    finally:
        conn.close()


async def _sqlite_in_transaction(path: str, deadline: float) -> bool:
    while time.monotonic() < deadline:
        if await asyncio.to_thread(_sqlite_locked, path):
            return True
        await asyncio.sleep(POLL_S)
    return False


async def wait_in_transaction(database_url: str, timeout_s: float, *, quiet_for_s: float = 0.0) -> bool:
    """True once a transaction is open on ``database_url`` (within ``timeout_s``), else False.

    On PostgreSQL, ``quiet_for_s`` asks for a transaction that has sent no statement for
    that long (SQLite cannot tell; its write lock is held for the whole transaction).
    """
    parsed = make_url(database_url)
    deadline = time.monotonic() + timeout_s
    backend = parsed.get_backend_name()
    if backend == "postgresql":
        psycopg = require("postgres", "psycopg", "watching a PostgreSQL transaction")
        try:
            return await _pg_in_transaction(psycopg, database_url, deadline, quiet_for_s)
        except (psycopg.Error, OSError) as exc:
            raise HarnessError(f"cannot watch the target's database for an open transaction: {exc}") from exc
    try:
        if backend == "sqlite" and parsed.database:
            return await _sqlite_in_transaction(parsed.database, deadline)
    except (sqlite3.Error, OSError) as exc:
        raise HarnessError(f"cannot watch the target's database for an open transaction: {exc}") from exc
    raise SpecError(f"got database {backend!r}; the lab can watch sqlite and postgresql transactions only")
