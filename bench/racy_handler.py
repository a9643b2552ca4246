"""A check-then-insert handler whose only bug is the race, served as a process of its own.

`RacyCheckThenInsert` is the tests' `CheckThenInsert` (tests/harness/handlers.py) made
strict about conflicts: a different body under a known event id gets 409, so the one
thing an explorer or an experiment can catch is two concurrent deliveries both passing the
check — not the conflict bug the tests' variant also has on purpose.

A user's webhook service is another process, never a thread sharing the lab's interpreter
(and its GIL): serving the racy handler in-process would let the lab's own event loop
decide when the handler's threads get to run, which measures the benchmark, not the lab.

    python -m bench.racy_handler --db URL --port PORT [--work-ms 5]

`RacyHandler` starts it, waits until it answers, and writes its target spec file.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx
from sqlalchemy import Engine, select

from tests.harness.handlers import Delivery, fulfillments, seen

READY_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class RacyCheckThenInsert:
    """Looks for the event (409 to a different body), works `work_s`, then records and fulfils it."""

    work_s: float = 0.005

    def process(self, engine: Engine, delivery: Delivery) -> tuple[int, dict[str, Any]]:
        with engine.connect() as conn:
            known = conn.execute(
                select(seen.c.body_sha256).where(seen.c.event_id == delivery.event_id)
            ).first()
        if known is not None:
            if known[0] != delivery.body_sha256:
                return 409, {"error": "conflict"}
            return 200, {"status": "duplicate"}
        if self.work_s:
            time.sleep(self.work_s)  # the window: another delivery of this event passes the check too
        # work_s 0: a bare SELECT, then the INSERT — the window is what the database takes between them
        with engine.begin() as conn:
            conn.execute(seen.insert().values(event_id=delivery.event_id, body_sha256=delivery.body_sha256))
            conn.execute(
                fulfillments.insert().values(event_id=delivery.event_id, amount_cents=delivery.amount_cents)
            )
        return 200, {"status": "fulfilled"}


def wal(path: Path) -> None:
    """Put the SQLite database at `path` in WAL mode (kept in the file: every connection after uses it).

    As the fixture does, and most SQLite apps serving concurrent requests: with the default rollback
    journal a reader's check can meet a writer's commit, get SQLITE_BUSY and sleep in SQLite's busy
    handler (1 ms, then 2, 5...) until the row is there — the race then loses to the back-off, not
    to the handler's code, and the lab measures SQLite's locking instead of the sender."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.closing(sqlite3.connect(path)) as conn:
        mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
    if mode != "wal":
        raise RuntimeError(f"SQLite at {path} refused WAL mode (journal_mode is {mode!r})")


class RacyHandler:
    """``with RacyHandler(db_url, spec_path) as spec:`` — the handler served and described."""

    def __init__(self, db_url: str, spec: Path, *, work_ms: float) -> None:
        self.db_url, self.spec, self.work_ms = db_url, spec, work_ms
        self._proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Path:
        from acklab.harness.ports import free_port
        from tests.harness.conftest import SECRET, SECRET_ENV, target_doc, write_spec

        os.environ[SECRET_ENV] = SECRET
        if self.db_url.startswith("sqlite:///"):
            wal(Path(self.db_url.removeprefix("sqlite:///")))
        port = free_port()
        root = Path(__file__).resolve().parent.parent
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "bench.racy_handler", "--db", self.db_url, "--port", str(port),
             "--work-ms", str(self.work_ms)],
            cwd=root, env={**os.environ, "PYTHONPATH": str(root)},
        )  # fmt: skip
        url = f"http://127.0.0.1:{port}/hooks"
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            try:
                httpx.get(url, timeout=1.0)  # 405: the route is there
                break
            except httpx.TransportError:
                if self._proc.poll() is not None or time.monotonic() > deadline:
                    self.__exit__(None, None, None)
                    raise RuntimeError(f"the racy handler on port {port} did not start") from None
                time.sleep(0.05)
        self.spec.parent.mkdir(parents=True, exist_ok=True)
        return write_spec(self.spec, target_doc("check-then-insert", url, self.db_url))

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._proc is not None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            self._proc = None


def main() -> None:
    import uvicorn

    from tests.harness.conftest import SECRET
    from tests.harness.handlers import handler_app

    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--db", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--work-ms", type=float, default=5.0)
    args = parser.parse_args()
    # Warm: a round's first burst must not open the pool's connections (a service in steady state
    # has them; on PostgreSQL each is a SCRAM handshake, and a cold pool lost the round's first trials).
    app = handler_app(RacyCheckThenInsert(work_s=args.work_ms / 1000), args.db, SECRET, warm=True)
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning", access_log=False, ws="none")


if __name__ == "__main__":
    main()
