"""The append-only journal: one SQLite file indexing every step of every run.

Every run, experiment, trial, delivery, observation, checkpoint, decision and lease is
appended as one row (validated as `journal-entry` first). Rows are never changed: triggers
refuse UPDATE and DELETE with ``RAISE(ABORT, ...)`` (re-created on every open, so dropping
them lasts only until the next one), so a journal is a record, not a state.

Tamper evidence. Each row carries the hash of the row before it and its own
(`evidence.chain`): an entry changed after the fact — triggers dropped, then UPDATE — breaks
the chain there, and `verify_chain` (run by ``acklab history`` and ``acklab evidence
verify``) names the first broken entry. A journal of schema version 1 is sealed with the
chain when first opened for writing.

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
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any

from .chain import GENESIS, ChainReport, entry_hash, walk
from .clock import utcnow
from .errors import EvidenceError
from .loading import EVIDENCE, EvidenceUnreadable, parse_json
from .redaction import known
from .validate import validate

JOURNAL_FILE = "journal.sqlite"
PULL_RUN = "evidence-pull"  # the name of the run entries `acklab evidence pull` records
BUSY_TIMEOUT_S = 30.0
SCHEMA_VERSION = 2

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
    recorded_at TEXT NOT NULL,
    prev_hash   TEXT,
    entry_hash  TEXT
);
CREATE INDEX IF NOT EXISTS entries_by_run ON entries (run_id, id);
CREATE INDEX IF NOT EXISTS entries_by_kind ON entries (kind, run_id);
"""
_TRIGGER_STATEMENTS = (
    "CREATE TRIGGER IF NOT EXISTS entries_no_update BEFORE UPDATE ON entries"
    " BEGIN SELECT RAISE(ABORT, 'the journal is append-only: UPDATE refused'); END",
    "CREATE TRIGGER IF NOT EXISTS entries_no_delete BEFORE DELETE ON entries"
    " BEGIN SELECT RAISE(ABORT, 'the journal is append-only: DELETE refused'); END",
)
_TRIGGERS = "".join(f"{statement};\n" for statement in _TRIGGER_STATEMENTS)
# The columns of evidence.chain.COLUMNS, in its order (a test holds them equal).
_SELECT_ROWS = (
    "SELECT id, run_id, kind, name, status, started_at, ended_at, duration_ms, payload, recorded_at"
    " FROM entries ORDER BY id"
)
_SELECT_CHAIN = (
    "SELECT id, run_id, kind, name, status, started_at, ended_at, duration_ms, payload, recorded_at,"
    " prev_hash, entry_hash FROM entries ORDER BY id"
)


class JournalError(EvidenceError):
    """The journal could not be opened, read or appended to (exit 4)."""


def _rows(cursor: sqlite3.Cursor) -> Any:
    """Rows of a cursor in batches, so a journal of millions of entries is walked in little memory."""
    while batch := cursor.fetchmany(1000):
        yield from batch


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


@dataclass(frozen=True)
class TrialCheckpoints:
    """What the journal recorded of one trial file: the sha256 of its first ``ok`` checkpoint,
    and each later ``rewritten`` one as (entry id, sha256), oldest first."""

    first: str
    rewrites: tuple[tuple[int, str], ...] = ()

    def expected(self, before: int | None = None) -> str:
        """The sha256 the file must have: its last rewrite before entry `before` (any, when
        None), else its first checkpoint."""
        kept = [sha for entry_id, sha in self.rewrites if before is None or entry_id < before]
        return kept[-1] if kept else self.first


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
    ``readonly=True`` reads an existing journal without writing a byte (it works in a
    read-only directory).
    """

    def __init__(self, path: Path, *, secrets: list[str] | None = None, readonly: bool = False) -> None:
        self.path = Path(path)
        self.readonly = readonly
        self._secrets = [s for s in (secrets or []) if s]
        self._lock = threading.Lock()
        try:
            if readonly:
                self._db = self._connect_readonly()
            else:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._db = sqlite3.connect(
                    self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False
                )
        except (OSError, sqlite3.Error) as exc:
            raise JournalError(f"cannot open the journal {self.path}: {exc}") from exc
        try:
            if readonly:
                self._check_version(self._db.execute("PRAGMA user_version").fetchone()[0])
            else:
                self._setup_when_unlocked()
        except sqlite3.Error as exc:
            self._db.close()
            raise JournalError(
                f"{self.path} is not a usable acklab journal ({exc}); "
                "move it aside and a new one will be created"
            ) from exc

    def _connect_readonly(self) -> sqlite3.Connection:
        if not self.path.is_file():
            raise sqlite3.OperationalError("no such file")
        uri = self.path.resolve().as_uri()
        try:
            db = sqlite3.connect(
                f"{uri}?mode=ro",
                uri=True,
                timeout=BUSY_TIMEOUT_S,
                isolation_level=None,
                check_same_thread=False,
            )
            db.execute("SELECT count(*) FROM sqlite_master").fetchone()
            return db
        except sqlite3.OperationalError:
            # A WAL journal in a directory nobody may write to (a mounted artifact, a copy):
            # SQLite cannot make its shared-memory file there, so read the file as it is.
            return sqlite3.connect(
                f"{uri}?immutable=1", uri=True, isolation_level=None, check_same_thread=False
            )

    @staticmethod
    def _check_version(version: int) -> None:
        # 0: a new file; 1: written before the hash chain (sealed when opened for writing).
        if version not in (0, 1, SCHEMA_VERSION):
            raise sqlite3.DatabaseError(f"journal schema version {version}, expected {SCHEMA_VERSION}")

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
        self._check_version(version)
        try:
            if version == 0:
                # One transaction, so a concurrent opener sees either no tables or all of them
                # (IF NOT EXISTS makes the race between two first openers harmless).
                self._db.executescript(
                    f"BEGIN IMMEDIATE; {_DDL} {_TRIGGERS} PRAGMA user_version = {SCHEMA_VERSION}; COMMIT;"
                )
            elif version == 1:
                self._seal_version_1()
            else:
                # Re-created on every open: a trigger dropped by hand is back before the next append.
                self._db.executescript(f"BEGIN IMMEDIATE; {_TRIGGERS} COMMIT;")
        except BaseException:
            if self._db.in_transaction:
                self._db.execute("ROLLBACK")
            raise

    def _seal_version_1(self) -> None:
        """Add the chain to a journal written before it: every row hashed as it stands now."""
        self._db.execute("BEGIN IMMEDIATE")
        if self._db.execute("PRAGMA user_version").fetchone()[0] != 1:  # another opener sealed it
            self._db.execute("COMMIT")
            return
        self._db.execute("DROP TRIGGER IF EXISTS entries_no_update")
        self._db.execute("ALTER TABLE entries ADD COLUMN prev_hash TEXT")
        self._db.execute("ALTER TABLE entries ADD COLUMN entry_hash TEXT")
        previous = GENESIS
        rows = self._db.execute(_SELECT_ROWS).fetchall()
        for row in rows:
            digest = entry_hash(previous, tuple(row))
            self._db.execute(
                "UPDATE entries SET prev_hash = ?, entry_hash = ? WHERE id = ?", (previous, digest, row[0])
            )
            previous = digest
        # One statement at a time: executescript() would commit the transaction first.
        for statement in _TRIGGER_STATEMENTS:
            self._db.execute(statement)
        self._db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        self._db.execute("COMMIT")

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
        if self.readonly:
            raise JournalError(f"the journal {self.path} was opened read-only")
        fields = (
            run_id,
            kind,
            name,
            status,
            started_at,
            ended_at,
            entry["duration_ms"],
            payload_json,
            entry["recorded_at"],
        )
        try:
            with self._lock:
                # The head is read and the new row written in one write transaction, so two
                # processes appending at once still make one unbroken chain.
                self._db.execute("BEGIN IMMEDIATE")
                try:
                    head = self._db.execute(
                        "SELECT id, entry_hash FROM entries ORDER BY id DESC LIMIT 1"
                    ).fetchone()
                    entry_id = (head[0] + 1) if head else 1
                    previous = (head[1] or GENESIS) if head else GENESIS
                    digest = entry_hash(previous, (entry_id, *fields))
                    self._db.execute(
                        "INSERT INTO entries (id, run_id, kind, name, status, started_at, ended_at,"
                        " duration_ms, payload, recorded_at, prev_hash, entry_hash)"
                        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        (entry_id, *fields, previous, digest),
                    )
                    self._db.execute("COMMIT")
                except BaseException:
                    if self._db.in_transaction:
                        self._db.execute("ROLLBACK")
                    raise
        except sqlite3.Error as exc:
            raise JournalError(f"cannot append to the journal {self.path}: {exc}") from exc
        return entry_id

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
                # Read bounded: a forged row may nest without end (exit 7, never a RecursionError).
                payload=parse_json(
                    r[8], source=f"{self.path}: entry #{r[0]}", limits=EVIDENCE, error=EvidenceUnreadable
                ),
                recorded_at=r[9],
            )
            for r in rows
        ]

    def verify_chain(self) -> ChainReport:
        """Walk the hash chain over every entry; the report names the first broken one."""
        try:
            with self._lock:
                cursor = self._db.execute(_SELECT_CHAIN)
                return walk(_rows(cursor))
        except sqlite3.OperationalError as exc:
            if "no such column" in str(exc):  # schema version 1, read-only: no chain yet
                total = self._query("SELECT count(*) FROM entries")[0][0]
                return walk([]) if not total else ChainReport(total, None, GENESIS, None)
            raise JournalError(f"cannot read the journal {self.path}: {exc}") from exc
        except sqlite3.Error as exc:
            raise JournalError(f"cannot read the journal {self.path}: {exc}") from exc

    def head(self) -> tuple[int, str] | None:
        """(id, hash) of the newest entry, None for an empty journal."""
        rows = self._query("SELECT id, entry_hash FROM entries ORDER BY id DESC LIMIT 1")
        return (int(rows[0][0]), str(rows[0][1])) if rows and rows[0][1] else None

    def entry_hash_of(self, entry_id: int) -> str | None:
        """The stored hash of entry `entry_id` (None when there is no such entry)."""
        rows = self._query("SELECT entry_hash FROM entries WHERE id = ?", (entry_id,))
        return str(rows[0][0]) if rows and rows[0][0] else None

    def finalised_bundles(self) -> dict[str, list[dict[str, Any]]]:
        """Bundle id -> the payloads of its ``bundle/finalised`` entries (manifest hashes), oldest first."""
        found: dict[str, list[dict[str, Any]]] = {}
        for name, payload in self._query(
            "SELECT name, payload FROM entries WHERE kind = 'bundle' AND status = 'finalised' ORDER BY id"
        ):
            try:
                doc = json.loads(payload)
            except ValueError:
                continue
            if isinstance(doc, dict):
                found.setdefault(str(name), []).append(doc)
        return found

    def bundle_entries(self, bundle_id: str) -> list[tuple[int, str, dict[str, Any]]]:
        """(entry id, status, payload) of every ``bundle`` entry of `bundle_id` (``finalised``,
        ``pulled``), oldest first."""
        found: list[tuple[int, str, dict[str, Any]]] = []
        for entry_id, status, payload in self._query(
            "SELECT id, status, payload FROM entries WHERE kind = 'bundle' AND name = ? ORDER BY id",
            (bundle_id,),
        ):
            try:
                doc = json.loads(payload)
            except ValueError:
                doc = None
            found.append((int(entry_id), str(status), doc if isinstance(doc, dict) else {}))
        return found

    def checkpoints(self, run_id: str) -> dict[str, TrialCheckpoints]:
        """Trial file (bundle-relative) -> what the journal recorded of it (``checkpoint`` entries
        of `run_id`): the sha256 of its first ``ok`` entry — a later ``ok`` for the same file
        counts for nothing — and each ``rewritten`` entry after it (the end-of-run re-read)."""
        found: dict[str, TrialCheckpoints] = {}
        for entry_id, status, payload in self._query(
            "SELECT id, status, payload FROM entries WHERE kind = 'checkpoint' AND run_id = ? ORDER BY id",
            (run_id,),
        ):
            try:
                doc = json.loads(payload)
            except ValueError:
                continue
            if not (
                isinstance(doc, dict)
                and isinstance(doc.get("file"), str)
                and isinstance(doc.get("sha256"), str)
            ):
                continue
            file, sha, earlier = doc["file"], doc["sha256"], found.get(doc["file"])
            if status == "ok" and earlier is None:
                found[file] = TrialCheckpoints(first=sha)
            elif status == "rewritten" and earlier is not None:
                found[file] = replace(earlier, rewrites=(*earlier.rewrites, (int(entry_id), sha)))
        return found

    def pulls(self, bundle_id: str) -> list[dict[str, Any]]:
        """The payloads of the ``bundle/pulled`` entries of `bundle_id` that lie inside a pull
        run of their own (`PULL_RUN`): after its ``started`` entry, which comes first in that
        run, and before its ``ok`` entry, whose ``bundles`` name `bundle_id`."""
        vouched = []
        for entry_id, run_id, payload in self._query(
            "SELECT id, run_id, payload FROM entries WHERE kind = 'bundle' AND status = 'pulled' AND name = ?"
            " ORDER BY id",
            (bundle_id,),
        ):
            run = self._query(
                "SELECT id, kind, name, status, payload FROM entries WHERE run_id = ? ORDER BY id", (run_id,)
            )
            if not run or run[0][1:4] != ("run", PULL_RUN, "started"):
                continue
            ends = [r for r in run if r[1:4] == ("run", PULL_RUN, "ok") and r[0] > entry_id]
            try:
                doc, end = json.loads(payload), json.loads(ends[0][4]) if ends else {}
            except ValueError:
                continue
            if isinstance(doc, dict) and isinstance(end, dict) and bundle_id in (end.get("bundles") or ()):
                vouched.append(doc)
        return vouched

    def ran(self, run_id: str) -> bool:
        """Whether this journal saw run `run_id` run (a ``run`` entry of it)."""
        return bool(self._query("SELECT 1 FROM entries WHERE kind = 'run' AND run_id = ? LIMIT 1", (run_id,)))

    def runs(self) -> list[str]:
        """Every run id in the journal, in the order each first appeared."""
        return [r[0] for r in self._query("SELECT run_id FROM entries GROUP BY run_id ORDER BY MIN(id)")]

    def integrity(self) -> str:
        """SQLite's own ``PRAGMA integrity_check`` ('ok' when the file is sound)."""
        return "; ".join(str(r[0]) for r in self._query("PRAGMA integrity_check"))
