"""The journal's hash chain: each entry carries the hash of the one before it.

An entry's hash is the sha256 of its canonical form — the previous entry's hash, its id and
every column it holds — so changing, removing or reordering any entry after the fact breaks
the chain at that entry and at every one after it. The first entry follows `GENESIS`.

What the chain proves, and what it cannot: it detects any edit of the journal file made
after the entries were written (an UPDATE with the triggers dropped, a row deleted, a forged
row inserted between two others). It cannot detect a journal rewritten *whole* by someone
who recomputes every hash, nor one cut short at its end; bundles bind the journal's head at
the time they are finalised (``manifest.journal_head``) and the journal records every
bundle's manifest hash, so `acklab evidence verify --journal` catches a cut or a rewrite
below any bundle. None of it protects against someone who controls the machine while the
lab runs: they can write whatever the lab would have written.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

GENESIS = "0" * 64
# The columns an entry's hash covers, in this order (the row as stored, payload as its JSON text).
COLUMNS = (
    "id",
    "run_id",
    "kind",
    "name",
    "status",
    "started_at",
    "ended_at",
    "duration_ms",
    "payload",
    "recorded_at",
)


def entry_hash(prev_hash: str, row: tuple[Any, ...]) -> str:
    """The hash of one entry: `row` holds the values of `COLUMNS`, in order."""
    canonical = json.dumps([prev_hash, *row], separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(canonical.encode("ascii")).hexdigest()


@dataclass(frozen=True)
class ChainBreak:
    """The first entry at which the journal no longer matches its chain."""

    entry_id: int
    run_id: str
    kind: str
    name: str
    why: str

    def describe(self) -> str:
        return (
            f"journal entry #{self.entry_id} ({self.kind} {self.name!r} of run {self.run_id!r}) {self.why}; "
            "the journal was changed after it was written"
        )


@dataclass(frozen=True)
class ChainReport:
    """The result of walking the chain."""

    entries: int
    head_id: int | None
    head_hash: str
    broken: ChainBreak | None

    @property
    def ok(self) -> bool:
        return self.broken is None


def walk(rows: Iterable[tuple[Any, ...]]) -> ChainReport:
    """Check the chain over rows of (*COLUMNS, prev_hash, entry_hash), in id order."""
    previous = GENESIS
    count = 0
    head_id: int | None = None
    for row in rows:
        *values, prev_hash, stored = row
        why = None
        if not isinstance(values[0], int) or (head_id is not None and values[0] <= head_id):
            why = "is out of order"
        elif prev_hash != previous:
            why = (
                "has no hash (written without the chain)"
                if prev_hash is None
                else "does not follow the entry before it (an entry before it was removed, added or changed)"
            )
        elif stored != entry_hash(previous, tuple(values)):
            why = "does not match its hash (its content was changed)"
        if why is not None:
            broken = ChainBreak(int(values[0]), str(values[1]), str(values[2]), str(values[3]), why)
            return ChainReport(count, head_id, previous, broken)
        previous, head_id = stored, values[0]
        count += 1
    return ChainReport(count, head_id, previous, None)
