"""The append-only journal: one SQLite file indexing every step of every run.

Every run, experiment, trial, delivery, observation, checkpoint, decision and lease is
appended as one row (validated as `journal-entry` first). Rows are never changed: triggers
refuse UPDATE and DELETE with ``RAISE(ABORT, ...)``, so a journal is a record, not a state.

Durability. The file is in WAL mode with ``synchronous=NORMAL``: each `record` is its own
transaction, and a committed row survives the writer being killed (``kill -9``) because
the WAL is replayed when the next connection opens it. A transaction that was in flight is
rolled back, never half-applied. (Power loss may drop the last few commits; a crashed
process cannot.) Several processes may write at once: writers wait up to
``busy_timeout`` for the lock instead of failing.

Default location: ``<evidence dir>/journal.sqlite`` (see `journal_path`).
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any

from .bundle import utcnow
from .errors import EvidenceError
from .redaction import known
from .validate import validate

JOURNAL_FILE = "journal.sqlite"
BUSY_TIMEOUT_S = 30.0
SCHEMA_VERSION = 1

_DDL = """
CREATE TABLE IF NOT EXISTS entries (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id      TEXT NOT NULL,
    kind        TEXT NOT NULL,
    name        TEXT NOT NULL,
    status      TEXT NOT NULL,
    started_at  TEXT,
    ended_at    TEXT,
    duration_ms REAL,
    payload     TEXT NOT NULL,
    recorded_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS entries_by_run ON entries (run_id, id);
CREATE INDEX IF NOT EXISTS entries_by_kind ON entries (kind, run_id);
CREATE TRIGGER IF NOT EXISTS entries_no_update BEFORE UPDATE ON entries
BEGIN SELECT RAISE(ABORT, 'the journal is append-only: UPDATE refused'); END;
CREATE TRIGGER IF NOT EXISTS entries_no_delete BEFORE DELETE ON entries
BEGIN SELECT RAISE(ABORT, 'the journal is append-only: DELETE refused'); END;
"""


class JournalError(EvidenceError):
    """The journal could not be opened, read or appended to (exit 4)."""


def journal_path(evidence_dir: Path) -> Path:
    """Where the journal of an evidence directory lives."""
    return Path(evidence_dir) / JOURNAL_FILE


@dataclass(frozen=True)
class JournalEntry:
    """One appended row of the journal."""

    id: int
    run_id: str
    kind: str
    name: str
    status: str
    started_at: str | None
    ended_at: str | None
    duration_ms: float | None
    payload: dict[str, Any]
    recorded_at: str

    def as_dict(self) -> dict[str, Any]:
        """The entry as a JSON-ready dict (what ``acklab history --json`` prints)."""
        return {
            "id": self.id,
            "run_id": self.run_id,
            "kind": self.kind,
            "name": self.name,
            "status": self.status,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "duration_ms": self.duration_ms,
            "payload": self.payload,
            "recorded_at": self.recorded_at,
        }


def _duration_ms(started_at: str | None, ended_at: str | None) -> float | None:
    if not (started_at and ended_at):
        return None
    start = datetime.fromisoformat(started_at.replace("Z", "+00:00"))
    end = datetime.fromisoformat(ended_at.replace("Z", "+00:00"))
    return max(0.0, round((end - start).total_seconds() * 1000, 3))


class Journal:
    """The append-only journal at `path` (created when absent). Safe across threads and processes.

    Use as a context manager, or call `close()`. Every entry is redacted before it is
    appended (the journal is append-only: a secret written once could never be scrubbed):
    the optional `secrets` and every secret the process knows (`evidence.redaction`).
    """

    def __init__(self, path: Path, *, secrets: list[str] | None = None) -> None:
        self.path = Path(path)
        self._secrets = [s for s in (secrets or []) if s]
        self._lock = threading.Lock()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(
                self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False
            )
        except (OSError, sqlite3.Error) as exc:
            raise JournalError(f"cannot open the journal {self.path}: {exc}") from exc
        try:
            self._setup_when_unlocked()
        except sqlite3.Error as exc:
            self._db.close()
            raise JournalError(
                f"{self.path} is not a usable acklab journal ({exc}); "
                "move it aside and a new one will be created"
            ) from exc

    def _setup_when_unlocked(self) -> None:
        # Switching a new file to WAL takes an exclusive lock, and SQLite can answer
        # SQLITE_BUSY there without consulting the busy handler while another process is
        # opening the same new journal; so retry for as long as the busy timeout allows.
        deadline = time.monotonic() + BUSY_TIMEOUT_S
        delay = 0.01
        while True:
            try:
                self._setup()
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() + delay > deadline:
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 0.5)

    def _setup(self) -> None:
        self._db.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
        mode = self._db.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise sqlite3.OperationalError(f"journal_mode is {mode!r}, WAL is required")
        self._db.execute("PRAGMA synchronous = NORMAL")
        version = self._db.execute("PRAGMA user_version").fetchone()[0]
        if version not in (0, SCHEMA_VERSION):
            raise sqlite3.DatabaseError(f"journal schema version {version}, expected {SCHEMA_VERSION}")
        if version == 0:
            # One transaction, so a concurrent opener sees either no tables or all of them
            # (IF NOT EXISTS makes the race between two first openers harmless).
            try:
                self._db.executescript(
                    f"BEGIN IMMEDIATE; {_DDL} PRAGMA user_version = {SCHEMA_VERSION}; COMMIT;"
                )
            except BaseException:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise

    def __enter__(self) -> Journal:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection (a no-op when already closed)."""
        with self._lock:
            self._db.close()

    def record(
        self,
        *,
        run_id: str,
        kind: str,
        name: str,
        status: str,
        started_at: str | None = None,
        ended_at: str | None = None,
        payload: dict[str, Any] | None = None,
    ) -> int:
        """Append one entry and return its id. Raises EvidenceInvalid when it does not validate."""
        redactor = known(self._secrets)
        name, status = redactor.text(name), redactor.text(status)
        payload = payload if payload is not None else {}
        try:
            payload_json = json.dumps(payload, sort_keys=True, ensure_ascii=False)
            # One pass over the whole text is the common case; only when it finds something
            # is the payload redacted string by string (which keeps the JSON sound).
            if redactor.text(payload_json) != payload_json:
                payload = redactor.doc(payload)
                payload_json = json.dumps(payload, sort_keys=True, ensure_ascii=False)
        except (TypeError, ValueError) as exc:
            raise JournalError(f"payload of {kind}/{name} is not JSON: {exc}") from exc
        entry: dict[str, Any] = {
            "run_id": run_id,
            "kind": kind,
            "name": name,
            "status": status,
            "started_at": started_at,
            "ended_at": ended_at,
            "duration_ms": _duration_ms(started_at, ended_at),
            "payload": payload,
            "recorded_at": utcnow(),
        }
        validate("journal-entry", entry, what=f"journal entry {kind}/{name} of run {run_id!r}")
        row = (run_id, kind, name, status, started_at, ended_at, entry["duration_ms"], payload_json)
        try:
            with self._lock:
                cursor = self._db.execute(
                    "INSERT INTO entries (run_id, kind, name, status, started_at, ended_at,"
                    " duration_ms, payload, recorded_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (*row, entry["recorded_at"]),
                )
        except sqlite3.Error as exc:
            raise JournalError(f"cannot append to the journal {self.path}: {exc}") from exc
        return int(cursor.lastrowid or 0)

    def _query(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        try:
            with self._lock:
                return self._db.execute(sql, params).fetchall()
        except sqlite3.Error as exc:
            raise JournalError(f"cannot read the journal {self.path}: {exc}") from exc

    def history(self, run_id: str) -> list[JournalEntry]:
        """Every entry of `run_id`, in the order it was appended (empty for an unknown run)."""
        rows = self._query(
            "SELECT id, run_id, kind, name, status, started_at, ended_at, duration_ms, payload,"
            " recorded_at FROM entries WHERE run_id = ? ORDER BY id",
            (run_id,),
        )
        return [
            JournalEntry(
                id=r[0],
                run_id=r[1],
                kind=r[2],
                name=r[3],
                status=r[4],
                started_at=r[5],
                ended_at=r[6],
                duration_ms=r[7],
                payload=json.loads(r[8]),
                recorded_at=r[9],
            )
            for r in rows
        ]

    def runs(self) -> list[str]:
        """Every run id in the journal, in the order each first appeared."""
        return [r[0] for r in self._query("SELECT run_id FROM entries GROUP BY run_id ORDER BY MIN(id)")]

    def integrity(self) -> str:
        """SQLite's own ``PRAGMA integrity_check`` ('ok' when the file is sound)."""
        return "; ".join(str(r[0]) for r in self._query("PRAGMA integrity_check"))
