"""`acklab validate` runs the count (and state) query once with a dummy id on the
read-only connection when the database is reachable, and refuses a missing table (exit 3)."""

from __future__ import annotations

import sqlite3

from acklab.harness.ports import free_port
from tests.harness.conftest import SECRET, SECRET_ENV, target_doc, write_spec
from tests.harness.test_cli import acklab


def _spec(tmp_path, count: str, *, state: str | None = None):
    db = tmp_path / "shop.db"
    doc = target_doc("shop", f"http://127.0.0.1:{free_port()}/hooks", f"sqlite:///{db}")
    doc["effects"]["sql"]["count"] = count
    if state is not None:
        doc["effects"]["sql"]["state"] = state
    return db, write_spec(tmp_path / "shop.yaml", doc)


def test_validate_refuses_a_count_on_a_table_that_does_not_exist(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(SECRET_ENV, SECRET)
    db, path = _spec(tmp_path, "SELECT count(*) FROM fulfilments WHERE event_id = :event_id")
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE fulfillments (event_id TEXT)")  # the table's real spelling
    before = db.read_bytes()
    assert acklab("validate", str(path)) == 3
    out = capsys.readouterr().out
    assert "no such table: fulfilments" in out
    assert "dummy id" in out
    assert db.read_bytes() == before  # read-only: nothing written


def test_validate_runs_count_and_state_once_on_a_reachable_database(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(SECRET_ENV, SECRET)
    db, path = _spec(
        tmp_path,
        "SELECT count(*) FROM fulfillments WHERE event_id = :event_id",
        state="SELECT amount FROM fulfillments WHERE event_id = :event_id",
    )
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE fulfillments (event_id TEXT, amount INTEGER)")
    assert acklab("validate", str(path)) == 0
    assert "effects.sql.count and effects.sql.state ran once with a dummy id" in capsys.readouterr().out
    # A state query on a missing column is refused too.
    _, wrong = _spec(
        tmp_path,
        "SELECT count(*) FROM fulfillments WHERE event_id = :event_id",
        state="SELECT amount_cents FROM fulfillments WHERE event_id = :event_id",
    )
    assert acklab("validate", str(wrong)) == 3
    assert "no such column: amount_cents" in capsys.readouterr().out
