"""Replaying a run from the journal: `acklab history RUN_ID` renders what `Journal.history` holds.

The journal is opened read-only (history works on a read-only evidence directory) and its
hash chain is checked first: a journal changed after the fact is exit 7, naming the first
broken entry, never shown as if it were the record. Every value is shown with control
characters escaped, so a name a handler chose cannot drive the terminal.
"""

from __future__ import annotations

import difflib
import unicodedata
from pathlib import Path

from acklab.evidence.errors import EvidenceInvalid, IntegrityError
from acklab.evidence.journal import Journal, JournalEntry, journal_path


def printable(text: str) -> str:
    """`text` with control and format characters (ESC, CSI, bidi overrides, NUL ...) escaped."""
    if text.isprintable():
        return text
    return "".join(
        ch
        if ch == " " or unicodedata.category(ch)[0] not in "CZ"
        else ch.encode("unicode_escape").decode("ascii")
        for ch in text
    )


def check_chain(journal: Journal) -> None:
    """IntegrityError (exit 7) naming the first entry at which the journal's hash chain breaks."""
    report = journal.verify_chain()
    if report.broken is not None:
        raise IntegrityError(f"{journal.path}: {printable(report.broken.describe())}")


def load_history(run_id: str, evidence_dir: Path) -> list[JournalEntry]:
    """The journal entries of `run_id`; EvidenceInvalid (exit 3) naming known runs when unknown,
    IntegrityError (exit 7) when the journal was changed after it was written."""
    path = journal_path(evidence_dir)
    if not path.is_file():
        raise EvidenceInvalid(
            f"no journal at {path}; pass --evidence DIR, the directory `acklab run --out DIR` wrote to"
        )
    with Journal(path, readonly=True) as journal:
        check_chain(journal)
        entries = journal.history(run_id)
        if entries:
            return entries
        known = journal.runs()
    if not known:
        raise EvidenceInvalid(f"unknown run id {printable(run_id)!r}: the journal {path} records no run yet")
    hint = difflib.get_close_matches(run_id, known, n=1)
    shown = [printable(k) for k in known[-20:]]
    listing = ", ".join(shown) + (
        f" (and {len(known) - len(shown)} older)" if len(known) > len(shown) else ""
    )
    raise EvidenceInvalid(
        f"unknown run id {printable(run_id)!r}"
        + (f"; did you mean {printable(hint[0])!r}?" if hint else "")
        + f" Runs in {path}: {listing}"
    )


def _duration(entry: JournalEntry) -> str:
    if entry.duration_ms is None:
        return "-"
    if entry.duration_ms < 1000:
        return f"{entry.duration_ms:.0f} ms"
    return f"{entry.duration_ms / 1000:.2f} s"


def render_table(entries: list[JournalEntry]) -> str:
    """A plain-text table: one line per step with kind, name, status, start, end and duration."""
    header = ("#", "kind", "name", "status", "started", "ended", "duration")
    rows = [
        tuple(
            printable(cell)
            for cell in (
                str(e.id),
                e.kind,
                e.name,
                e.status,
                e.started_at or e.recorded_at,
                e.ended_at or "-",
                _duration(e),
            )
        )
        for e in entries
    ]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in [header, *rows]
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
