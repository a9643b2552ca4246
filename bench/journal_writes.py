"""Journal write throughput, and what WAL and the append-only triggers cost.

Four writers append the same realistic delivery rows, one row per transaction (as the
journal does), taking turns a few rows at a time so that a noisy neighbour hits them all
alike:

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
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from acklab.evidence.clock import utcnow
from acklab.evidence.journal import _DDL, _TRIGGERS, BUSY_TIMEOUT_S, Journal
from bench.figures import Figure, print_figure

INSERT = (
    "INSERT INTO entries (run_id, kind, name, status, started_at, ended_at,"
    " duration_ms, payload, recorded_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
# The journal's DDL without the statements that create its triggers (they are kept apart:
# the journal re-creates them on every open).
DDL_NO_TRIGGERS = _DDL


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
    db.executescript(_DDL + _TRIGGERS if triggers else DDL_NO_TRIGGERS)

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


# The rollback writer waits for an fsync per row: it takes one turn in this many, so that a
# busy disk cannot stretch the whole benchmark (its rate is per row, so fewer rows do).
ROLLBACK_EVERY = 10


@dataclass
class Spent:
    rows: int = 0
    wall_s: float = 0.0
    cpu_s: float = 0.0


def measure(*, rows: int, rounds: int, root: Path, chunk: int = 20) -> dict[str, tuple[float, float]]:
    """Per writer: median (rows per wall second, rows per CPU second) over `rounds` rounds.

    Within a round the writers take turns `chunk` rows at a time, in a rotating order, so
    that a neighbour's burst of disk or CPU load lands on all of them alike rather than on
    whichever writer happened to be running (a whole round is only ~50 ms for WAL). CPU
    time (this thread's, user + system) is what a preemption cannot inflate: the WAL
    writers are CPU-bound, so their comparisons use it.
    """
    names = list(WRITERS)
    wall: dict[str, list[float]] = {name: [] for name in names}
    cpu: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        writers = {name: WRITERS[name](root / f"{name}-{r}.sqlite") for name in names}
        spent = {name: Spent() for name in names}
        try:
            for writer in writers.values():
                writer(0)  # warm: the first append pays for the schema and the file
            for turn, first in enumerate(range(1, rows + 1, chunk)):
                shift = turn % len(names)
                for name in names[shift:] + names[:shift]:
                    if name == "rollback" and turn % ROLLBACK_EVERY:
                        continue
                    write, seqs = writers[name], range(first, min(first + chunk, rows + 1))
                    start, start_cpu = time.perf_counter(), time.thread_time()
                    for seq in seqs:
                        write(seq)
                    spent[name].wall_s += time.perf_counter() - start
                    spent[name].cpu_s += time.thread_time() - start_cpu
                    spent[name].rows += len(seqs)
        finally:
            for writer in writers.values():
                writer.close()  # type: ignore[attr-defined]
        for name in names:
            wall[name].append(spent[name].rows / spent[name].wall_s)
            cpu[name].append(spent[name].rows / max(spent[name].cpu_s, 1e-9))
    return {name: (statistics.median(wall[name]), statistics.median(cpu[name])) for name in names}


def figures(quick: bool = False) -> list[Figure]:
    root = Path(tempfile.mkdtemp(prefix="acklab-bench-journal-"))
    try:
        rates = measure(rows=200 if quick else 1000, rounds=3 if quick else 7, root=root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    (journal, journal_cpu), (built, built_cpu), (_, bare_cpu), (rollback, _) = (
        rates[k] for k in ("journal", "built", "no-triggers", "rollback")
    )
    return [
        Figure(
            "journal append (as built)",
            journal,
            "rows/s",
            baseline=built,
            ratio=journal / built,
            note=(
                "Journal.record (schema validation, encoding, secrets guard, hash chain, INSERT) vs the bare INSERT on "
                f"the same schema; by CPU time {journal_cpu / built_cpu:.2f}x"
            ),
        ),
        Figure(
            "journal: append-only triggers",
            built_cpu,
            "rows/CPU-s",
            baseline=bare_cpu,
            ratio=built_cpu / bare_cpu,
            note="WAL with the UPDATE/DELETE triggers vs the same schema without them, by CPU time (they fire only on UPDATE/DELETE)",
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
