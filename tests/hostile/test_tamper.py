"""Hostile input (docs/hostile-input.md): the journal and the bundles are tamper-evident after the fact.

Dropping the triggers and updating a row breaks the hash chain (`history` and `evidence
verify` exit 7 naming the first broken entry); the triggers come back on the next open; a
bundle rewritten with its manifest recomputed verifies "intact" against itself but not
against the journal (`evidence verify --journal`), nor against a signing key; `history`
escapes control characters and reads a read-only evidence directory.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from acklab.evidence.bundle import atomic_write, dump_json, file_table
from acklab.evidence.chain import COLUMNS
from acklab.evidence.journal import _SELECT_CHAIN, _SELECT_ROWS, Journal, journal_path
from tests.evidence.factories import journal_checkpoints, write_run_bundle


@pytest.fixture
def recorded(tmp_path: Path) -> Path:
    """An evidence directory whose journal recorded two steps of r1 and the finalisation of two bundles."""
    out = tmp_path / "out"
    with Journal(journal_path(out)) as journal:
        journal.record(run_id="r1", kind="run", name="fixture:live", status="started")
        journal.record(run_id="r1", kind="trial", name="lost-ack-0000", status="pass", payload={"n": 1})
    journal_checkpoints(write_run_bundle(out / "r1", "r1", {"lost-ack": [(0, "fail")]}))
    write_run_bundle(out / "r2", "r2", {"replay": [(0, "pass")]})
    return out


def sql(out: Path, *statements: str) -> None:
    db = sqlite3.connect(journal_path(out))
    for statement in statements:
        db.execute(statement)
    db.commit()
    db.close()


def test_the_chain_covers_the_columns_it_names():
    assert _SELECT_ROWS.startswith("SELECT " + ", ".join(COLUMNS) + " FROM")
    assert _SELECT_CHAIN.startswith("SELECT " + ", ".join(COLUMNS) + ", prev_hash, entry_hash FROM")


def test_a_forged_update_with_the_triggers_dropped_is_exit_7_naming_the_entry(recorded, acklab):
    code, out, _ = acklab("history", "r1", "--evidence", recorded)
    assert code == 0
    assert "lost-ack-0000" in out
    sql(recorded, "DROP TRIGGER entries_no_update", "UPDATE entries SET status = 'fail' WHERE id = 2")
    code, out, err = acklab("history", "r1", "--evidence", recorded)
    assert code == 7, err
    assert "journal entry #2 (trial 'lost-ack-0000' of run 'r1') does not match its hash" in err
    assert "pass" not in out  # the forged rows are not shown as the record
    code, _, err = acklab("evidence", "verify", recorded)
    assert code == 7
    assert "journal entry #2" in err


def test_a_deleted_or_inserted_row_breaks_the_chain_at_the_next_entry(recorded, acklab):
    sql(recorded, "DROP TRIGGER entries_no_delete", "DELETE FROM entries WHERE id = 1")
    code, _, err = acklab("history", "r1", "--evidence", recorded)
    assert code == 7
    assert "journal entry #2" in err
    assert "does not follow the entry before it" in err


def test_the_triggers_are_back_after_the_next_open(recorded):
    sql(recorded, "DROP TRIGGER entries_no_update", "DROP TRIGGER entries_no_delete")
    Journal(journal_path(recorded)).close()
    db = sqlite3.connect(journal_path(recorded))
    with pytest.raises(sqlite3.IntegrityError, match="append-only: UPDATE refused"):
        db.execute("UPDATE entries SET status = 'x'")
    with pytest.raises(sqlite3.IntegrityError, match="append-only: DELETE refused"):
        db.execute("DELETE FROM entries")
    db.close()


def rewrite(bundle: Path, change: dict[str, object]) -> None:
    """Edit run.json and recompute the manifest over it, as a forger who knows the format would."""
    run = json.loads((bundle / "run.json").read_text())
    run.update(change)
    (bundle / "run.json").write_text(json.dumps(run))
    manifest = json.loads((bundle / "manifest.json").read_text())
    manifest["files"] = file_table(bundle)
    atomic_write(bundle / "manifest.json", dump_json(manifest))


def test_a_recomputed_manifest_is_caught_by_the_journal(recorded, acklab):
    code, out, _ = acklab("evidence", "verify", recorded, "--journal")
    assert code == 0, out
    rewrite(recorded / "r1", {"verdict": "pass"})
    code, out, _ = acklab("evidence", "verify", recorded / "r1")
    assert code == 0  # the manifest alone is fooled ...
    code, out, _ = acklab("evidence", "verify", recorded, "--journal")
    assert code == 7  # ... the journal is not
    assert "is not the manifest the journal recorded when the bundle was finalised" in out
    assert "r2: intact" in out


def test_a_journal_cut_short_is_caught_by_the_bundles_it_vouched_for(recorded, acklab):
    sql(
        recorded,
        "DROP TRIGGER entries_no_delete",
        "DELETE FROM entries WHERE id >= (SELECT min(id) FROM entries WHERE kind = 'bundle')",
    )
    code, out, err = acklab("evidence", "verify", recorded, "--journal")
    assert code == 7, err
    assert "has no record of bundle 'r1' being finalised" in out
    assert "no longer holds entry #" in out


def test_a_signing_key_catches_a_recomputed_manifest_without_a_journal(tmp_path, acklab, monkeypatch):
    monkeypatch.setenv("ACKLAB_MANIFEST_KEY", "k" * 32)
    bundle = write_run_bundle(tmp_path / "signed", "s1", {"lost-ack": [(0, "pass")]})
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["signature"]["alg"] == "hmac-sha256"
    assert "k" * 32 not in (bundle / "manifest.json").read_text()
    code, out, _ = acklab("evidence", "verify", bundle)
    assert code == 0, out
    rewrite(bundle, {"verdict": "fail"})
    code, out, _ = acklab("evidence", "verify", bundle)
    assert code == 7
    assert "signature: the manifest's signature does not match its content" in out
    monkeypatch.setenv("ACKLAB_MANIFEST_KEY", "another key")
    code, out, _ = acklab("evidence", "verify", bundle)
    assert code == 7
    assert "signed with key" in out


def test_history_escapes_control_characters(tmp_path, acklab):
    out = tmp_path / "out"
    with Journal(journal_path(out)) as journal:
        journal.record(run_id="r1", kind="note", name="\x1b]0;owned\x07\x1b[2J\u202eevil\x9b31m", status="ok")
    code, text, _ = acklab("history", "r1", "--evidence", out)
    assert code == 0
    assert "\x1b" not in text
    assert "\x9b" not in text
    assert "\u202e" not in text
    assert "\\x1b]0;owned\\x07\\x1b[2J\\u202eevil\\x9b31m" in text
    code, text, _ = acklab("history", "r1", "--evidence", out, "--json")
    assert code == 0
    assert "\x1b" not in text
    assert "\x9b" not in text


def test_history_reads_a_read_only_evidence_directory(recorded, tmp_path):
    shutil.rmtree(recorded / "r1")
    recorded.chmod(0o555)
    (journal_path(recorded)).chmod(0o444)
    before = sorted(p.name for p in recorded.iterdir())
    try:
        # As root, permissions bind only without CAP_DAC_OVERRIDE: drop it for the child.
        done = subprocess.run(
            [
                "setpriv",
                "--bounding-set",
                "-dac_override,-dac_read_search,-fowner",
                "--",
                sys.executable,
                "-c",
                "from acklab.cli import main; main()",
                "history",
                "r1",
                "--evidence",
                str(recorded),
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        touched = subprocess.run(
            [
                "setpriv",
                "--bounding-set",
                "-dac_override,-dac_read_search,-fowner",
                "--",
                "touch",
                str(recorded / "x"),
            ],
            capture_output=True,
            check=False,
        )
    finally:
        recorded.chmod(0o755)
    assert touched.returncode != 0  # the directory really was read-only for the child
    assert done.returncode == 0, done.stderr
    assert "lost-ack-0000" in done.stdout
    assert sorted(p.name for p in recorded.iterdir()) == before


def test_a_journal_written_before_the_chain_is_sealed_when_next_opened(tmp_path, acklab):
    out = tmp_path / "out"
    out.mkdir()
    db = sqlite3.connect(journal_path(out))
    db.executescript(
        """
        CREATE TABLE entries (id INTEGER PRIMARY KEY AUTOINCREMENT, run_id TEXT NOT NULL, kind TEXT NOT NULL,
            name TEXT NOT NULL, status TEXT NOT NULL, started_at TEXT, ended_at TEXT, duration_ms REAL,
            payload TEXT NOT NULL, recorded_at TEXT NOT NULL);
        CREATE TRIGGER entries_no_update BEFORE UPDATE ON entries
        BEGIN SELECT RAISE(ABORT, 'the journal is append-only: UPDATE refused'); END;
        INSERT INTO entries (run_id, kind, name, status, payload, recorded_at)
            VALUES ('old', 'run', 'fixture:live', 'pass', '{}', '2026-01-01T00:00:00Z');
        PRAGMA user_version = 1;
        """
    )
    db.close()
    code, text, err = acklab("history", "old", "--evidence", out)  # read-only: shown, not sealed
    assert code == 0, err
    with Journal(journal_path(out)) as journal:  # the next writer seals it
        journal.record(run_id="new", kind="note", name="n", status="ok")
        report = journal.verify_chain()
    assert report.ok
    assert report.entries == 2
    code, text, err = acklab("history", "old", "--evidence", out)
    assert code == 0, err
    assert "fixture:live" in text
