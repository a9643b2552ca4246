"""Effects and state probes read concurrently: the end-of-run re-read uses eight at once, and
the executor has more threads than SQLAlchemy's per-thread SQLite pool would keep."""

from __future__ import annotations

import asyncio
import sqlite3
from concurrent.futures import ThreadPoolExecutor

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
