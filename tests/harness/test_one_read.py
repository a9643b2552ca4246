"""An observation's count and state are one read — one read-only transaction — where both
are SQL queries on one database: a commit between the two queries is seen by neither or by both."""

from __future__ import annotations

import asyncio
import sqlite3

import psycopg
import pytest
from sqlalchemy.engine import make_url

from acklab.harness.targets.effects import SqlProbe
from acklab.harness.targets.state import SqlState, read_together

COUNT = "SELECT count(*) FROM orders WHERE event_id = :event_id"
STATE = "SELECT amount FROM orders WHERE event_id = :event_id"


def _commit_between(probe: SqlProbe, state: SqlState, write) -> tuple[int, str | None]:
    """Read count then state, with `write` committing the event's row between the two queries."""
    rows = state.rows

    def then_write(conn, event_id, object_id):
        write()  # another connection commits the effect after the count was read
        return rows(conn, event_id, object_id)

    state.rows = then_write  # type: ignore[method-assign]

    async def read() -> tuple[int, str | None]:
        try:
            return await read_together(probe, state, "evt_1", None)
        finally:
            await probe.aclose()
            await state.aclose()

    return asyncio.run(read())


def test_sqlite_count_and_state_come_from_one_snapshot(tmp_path):
    path = tmp_path / "shop.sqlite"
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("CREATE TABLE orders (event_id TEXT, amount INTEGER)")
    url = f"sqlite:///{path}"

    def write() -> None:
        with sqlite3.connect(path) as conn:
            conn.execute("INSERT INTO orders VALUES ('evt_1', 1200)")

    assert _commit_between(SqlProbe(url, COUNT), SqlState(url, STATE), write) == (0, "[]")
    # Read again: both see the commit.
    assert asyncio.run(read_together(SqlProbe(url, COUNT), SqlState(url, STATE), "evt_1", None)) == (
        1,
        "[[1200]]",
    )


@pytest.mark.postgres
def test_postgresql_count_and_state_come_from_one_snapshot(pg_url):
    dsn = make_url(pg_url).set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS orders")
        conn.execute("CREATE TABLE orders (event_id TEXT, amount INTEGER)")

    def write() -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("INSERT INTO orders VALUES ('evt_1', 1200)")

    assert _commit_between(SqlProbe(pg_url, COUNT), SqlState(pg_url, STATE), write) == (0, "[]")
