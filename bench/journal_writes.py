"""Journal write throughput, and what WAL and the append-only triggers cost.

Four writers append the same realistic delivery rows, one row per transaction (as the
journal does), interleaved round by round so that a noisy neighbour hits them all alike:

* ``journal``      the journal as built (`evidence.journal.Journal.record`: schema
                   validation, JSON encoding, the secrets guard, then the INSERT);
* ``built``        the journal's own schema and pragmas (WAL, synchronous=NORMAL,
                   triggers), plain INSERTs: the storage cost alone;
* ``no-triggers``  the same without the two BEFORE UPDATE/DELETE triggers;
* ``rollback``     the same schema with triggers in SQLite's default rollback-journal
                   mode (journal_mode=DELETE, synchronous=FULL): an fsync per commit.

``python -m bench.journal_writes [--quick]`` prints the figures.
"""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.figures import Figure, print_figure
from evidence.bundle import utcnow
from evidence.journal import _DDL, BUSY_TIMEOUT_S, Journal

INSERT = (
    "INSERT INTO entries (run_id, kind, name, status, started_at, ended_at,"
    " duration_ms, payload, recorded_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
# The journal's DDL without the statements that create its triggers.
DDL_NO_TRIGGERS = re.sub(r"CREATE TRIGGER .*?\bEND;", "", _DDL, flags=re.DOTALL)


def delivery_payload(seq: int) -> dict[str, Any]:
    """A delivery as the harness journals it (DeliveryRecorded: ~600 bytes of JSON)."""
    return {
        "seq": seq,
        "event_id": f"evt_{seq:024x}",
        "attempt": 1,
        "kind": "original",
        "fault": "none",
        "sent_at": utcnow(),
        "latency_ms": 3.217,
        "status": 200,
        "sender_status": 200,
        "error": None,
        "headers": {
            "content-type": "application/json",
            "user-agent": "acklab",
            "webhook-id": f"msg_{seq:024x}",
            "webhook-timestamp": "1700000000",
            "webhook-signature": "<redacted>",
        },
        "body_sha256": "0" * 64,
        "response_excerpt": '{"status":"fulfilled","fulfillment_id":1}',
    }


def _raw_writer(path: Path, *, wal: bool, triggers: bool) -> Callable[[int], None]:
    db = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
    if wal:
        db.execute("PRAGMA journal_mode = WAL")
        db.execute("PRAGMA synchronous = NORMAL")
    else:
        db.execute("PRAGMA journal_mode = DELETE")
        db.execute("PRAGMA synchronous = FULL")
    db.executescript(_DDL if triggers else DDL_NO_TRIGGERS)

    def write(seq: int) -> None:
        now = utcnow()
        payload = json.dumps(delivery_payload(seq), sort_keys=True)
        db.execute(
            INSERT, ("bench-run", "delivery", f"trial-0000#{seq}", "answered", now, None, None, payload, now)
        )

    write.close = db.close  # type: ignore[attr-defined]
    return write


def _journal_writer(path: Path) -> Callable[[int], None]:
    journal = Journal(path)

    def write(seq: int) -> None:
        journal.record(
            run_id="bench-run",
            kind="delivery",
            name=f"trial-0000#{seq}",
            status="answered",
            started_at=utcnow(),
            payload=delivery_payload(seq),
        )

    write.close = journal.close  # type: ignore[attr-defined]
    return write


WRITERS: dict[str, Callable[[Path], Callable[[int], None]]] = {
    "journal": _journal_writer,
    "built": lambda p: _raw_writer(p, wal=True, triggers=True),
    "no-triggers": lambda p: _raw_writer(p, wal=True, triggers=False),
    "rollback": lambda p: _raw_writer(p, wal=False, triggers=True),
}


def measure(*, rows: int, rounds: int, root: Path) -> dict[str, float]:
    """Median rows/s of each writer over `rounds` interleaved rounds of `rows` appends."""
    rates: dict[str, list[float]] = {name: [] for name in WRITERS}
    for r in range(rounds):
        for name, make in WRITERS.items():
            writer = make(root / f"{name}-{r}.sqlite")
            try:
                writer(0)  # warm: the first append pays for the schema and the file
                start = time.perf_counter()
                for seq in range(1, rows + 1):
                    writer(seq)
                rates[name].append(rows / (time.perf_counter() - start))
            finally:
                writer.close()  # type: ignore[attr-defined]
    return {name: statistics.median(values) for name, values in rates.items()}


def figures(quick: bool = False) -> list[Figure]:
    root = Path(tempfile.mkdtemp(prefix="acklab-bench-journal-"))
    try:
        rates = measure(rows=200 if quick else 1000, rounds=3 if quick else 5, root=root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    journal, built, bare, rollback = (rates[k] for k in ("journal", "built", "no-triggers", "rollback"))
    return [
        Figure(
            "journal append (as built)",
            journal,
            "rows/s",
            baseline=built,
            ratio=journal / built,
            note="Journal.record (validate, encode, secrets guard, INSERT) vs the bare INSERT on the same schema",
        ),
        Figure(
            "journal: append-only triggers",
            built,
            "rows/s",
            baseline=bare,
            ratio=built / bare,
            note="WAL with the UPDATE/DELETE triggers vs the same schema without them (triggers fire only on UPDATE/DELETE)",
        ),
        Figure(
            "journal: WAL vs rollback journal",
            built,
            "rows/s",
            baseline=rollback,
            ratio=built / rollback,
            note="WAL + synchronous=NORMAL vs journal_mode=DELETE + synchronous=FULL (an fsync per commit)",
        ),
    ]


def main() -> None:
    for figure in figures(quick="--quick" in sys.argv[1:]):
        print_figure(figure)


if __name__ == "__main__":
    main()
