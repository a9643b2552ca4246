"""Effects and state probes read concurrently: the end-of-run re-read uses eight at once, and
the executor has more threads than SQLAlchemy's per-thread SQLite pool would keep."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psycopg
import pytest
from sqlalchemy import event
from sqlalchemy.engine import make_url
from sqlalchemy.pool import Pool

from acklab.harness.engine.late_read import CONCURRENT_READS
from acklab.harness.errors import ProbeError
from acklab.harness.targets.effects import SqlProbe
from acklab.harness.targets.state import SqlState


def test_many_threads_read_one_sqlite_database_without_crashing(tmp_path):
    db = tmp_path / "shop.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE orders (event_id TEXT, amount INTEGER)")
        conn.executemany("INSERT INTO orders VALUES (?, ?)", [(f"evt_{i % 7}", i) for i in range(70)])
    probe = SqlProbe(f"sqlite:///{db}", "SELECT count(*) FROM orders WHERE event_id = :event_id")
    state = SqlState(f"sqlite:///{db}", "SELECT sum(amount) FROM orders WHERE event_id = :event_id")

    async def read_all() -> list[tuple[int, str]]:
        loop = asyncio.get_running_loop()
        loop.set_default_executor(ThreadPoolExecutor(max_workers=16))

        async def one(i: int) -> tuple[int, str]:
            return await probe.count(f"evt_{i % 7}"), await state.read(f"evt_{i % 7}")

        try:
            return await asyncio.gather(*(one(i) for i in range(400)))
        finally:
            await probe.aclose()
            await state.aclose()

    results = asyncio.run(read_all())
    assert {count for count, _ in results} == {10}
    assert results[0][1] == "[[" + str(sum(range(0, 70, 7))) + "]]"


@pytest.mark.postgres
def test_closing_a_probe_waits_for_a_read_still_holding_a_connection_and_leaves_none_open(pg_url):
    """A read whose caller stopped waiting for it (a sibling of its gather failed) still holds
    a connection when the probe is closed: the close refuses every read asked for from then
    on, waits for that connection to come back, and only then disposes of the engine — every
    connection the probe opened is closed once aclose returns, none left to the garbage collector."""
    dsn = make_url(pg_url).set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE orders (event_id TEXT, amount INTEGER)")
        conn.execute("INSERT INTO orders VALUES ('evt_1', 1200)")
    opened: list[Any] = []

    def connected(dbapi_connection: Any, _record: Any) -> None:
        opened.append(dbapi_connection)

    probe = SqlProbe(pg_url, "SELECT count(*) FROM orders WHERE event_id = :event_id")
    event.listen(Pool, "connect", connected)
    try:
        first, (held, refused) = asyncio.run(_close_while_reading(probe))
    finally:
        event.remove(Pool, "connect", connected)
    assert first == [1] * CONCURRENT_READS
    assert held == 1
    assert refused is not None
    assert "after its probe was closed" in refused
    assert opened
    assert [c for c in opened if not c.closed] == []


async def _close_while_reading(probe: SqlProbe) -> tuple[list[int], tuple[int, str | None]]:
    """Eight first reads at once, then a read that, while it holds its connection, has the
    probe closed from the event loop and waits until the close refuses it a second read (or
    the close finished under it); what the second read was told."""
    loop = asyncio.get_running_loop()
    closed = threading.Event()

    async def close() -> None:
        await probe.aclose()
        closed.set()

    def hold(_conn: Any) -> str | None:
        loop.call_soon_threadsafe(lambda: closing.append(loop.create_task(close())))
        while not closed.is_set():
            try:
                probe.count_now("evt_1")
            except ProbeError as exc:
                return str(exc)
            time.sleep(0.01)  # paces the asking; the close's progress decides the answer
        return None

    closing: list[asyncio.Task[None]] = []
    first = await asyncio.gather(*(probe.count("evt_1") for _ in range(CONCURRENT_READS)))
    held = await probe.count_with("evt_1", None, hold)
    await closing[0]
    return list(first), held
