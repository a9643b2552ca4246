"""A count query is the spec author's text run on the target's database: it can never change it.

Hostile queries (CREATE TABLE ... AS SELECT, ATTACH DATABASE, setval(), INSERT ... RETURNING,
lifting read-only from inside the query) leave a SQLite file byte-identical, create no
file, and leave a PostgreSQL database unchanged; each is reported with the database's own
reason (exit 3 when the query tried to write, 4 when it could not run).
"""

from __future__ import annotations

import asyncio
import hashlib
import sqlite3
from pathlib import Path

import psycopg
import pytest
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from acklab.harness.errors import HarnessError, ProbeError, SpecError
from acklab.harness.targets.effects import SqlProbe
from acklab.harness.targets.server import ThreadedServer
from tests.harness.conftest import SECRET, SECRET_ENV, target_doc, write_spec
from tests.harness.test_cli import acklab

SQLITE_HOSTILE = [
    ("CREATE TABLE stolen AS SELECT * FROM f WHERE event_id = :event_id", SpecError),
    ("ATTACH DATABASE :event_id AS planted", SpecError),  # would create a file named after the event
    ("INSERT INTO f (event_id) VALUES (:event_id) RETURNING 1", SpecError),
    ("DELETE FROM f WHERE event_id <> :event_id RETURNING 1", SpecError),
    ("SELECT count(*) FROM pragma_query_only WHERE :event_id IS NOT NULL", SpecError),
    ("SELECT count(*) FROM f WHERE event_id = :event_id; DROP TABLE f", ProbeError),
]
PG_HOSTILE = [
    ("CREATE TABLE stolen AS SELECT * FROM f WHERE event_id = :event_id", SpecError),
    ("SELECT setval('f_id_seq', 999) FROM f WHERE event_id = :event_id", SpecError),
    ("SELECT count(nextval('f_id_seq')) FROM f WHERE event_id = :event_id", SpecError),
    ("INSERT INTO f (event_id) VALUES (:event_id) RETURNING 1", SpecError),
    (
        "WITH gone AS (DELETE FROM f WHERE event_id <> :event_id RETURNING 1) SELECT count(*) FROM gone",
        SpecError,
    ),
    (
        "SELECT set_config('transaction_read_only', 'off', true), count(*) FROM f WHERE event_id = :event_id",
        HarnessError,
    ),
    ("SELECT count(*) FROM f WHERE event_id = :event_id; DELETE FROM f", HarnessError),
]


def sqlite_db(path: Path) -> Path:
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE f (id INTEGER PRIMARY KEY, event_id TEXT)")
        conn.executemany("INSERT INTO f (event_id) VALUES (?)", [("evt_1",), ("evt_2",)])
    return path


def count(url: str, query: str, event_id: str = "evt_1") -> int:
    async def go() -> int:
        probe = SqlProbe(url, query)
        try:
            return await probe.count(event_id)
        finally:
            await probe.aclose()

    return asyncio.run(go())


def test_an_honest_query_still_counts(tmp_path):
    db = sqlite_db(tmp_path / "shop.db")
    assert count(f"sqlite:///{db}", "SELECT count(*) FROM f WHERE event_id = :event_id") == 1


@pytest.mark.parametrize(("query", "error"), SQLITE_HOSTILE)
def test_a_hostile_query_leaves_the_sqlite_file_byte_identical(tmp_path, monkeypatch, query, error):
    monkeypatch.chdir(tmp_path)
    db = sqlite_db(tmp_path / "shop.db")
    before, listing = hashlib.sha256(db.read_bytes()).hexdigest(), sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(error) as info:
        count(f"sqlite:///{db}", query, event_id=str(tmp_path / "planted.db"))
    assert hashlib.sha256(db.read_bytes()).hexdigest() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == listing  # ATTACH created nothing
    if error is SpecError:
        assert "tried to change the database" in str(info.value)
        assert any(why in str(info.value) for why in ("not authorized", "readonly database"))


def test_a_hostile_count_in_a_spec_is_exit_3_before_any_trial(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(SECRET_ENV, SECRET)
    monkeypatch.chdir(tmp_path)
    db = sqlite_db(tmp_path / "shop.db")
    before = hashlib.sha256(db.read_bytes()).hexdigest()
    app = Starlette(routes=[Route("/hooks", lambda r: PlainTextResponse("ok"), methods=["POST"])])
    with ThreadedServer(app) as server:
        doc = target_doc("shop", f"{server.url}/hooks", f"sqlite:///{db}")
        doc["effects"]["sql"]["count"] = "CREATE TABLE stolen AS SELECT * FROM f WHERE event_id = :event_id"
        path = write_spec(tmp_path / "shop.yaml", doc)
        assert (
            acklab("run", "--target", str(path), "--experiment", "lost-ack", "--out", str(tmp_path / "out"))
            == 3
        )
    err = capsys.readouterr().err
    assert "effects.sql.count tried to change the database" in err
    assert "refused it (OperationalError: not authorized)" in err  # the reason, as SQLite gave it
    assert hashlib.sha256(db.read_bytes()).hexdigest() == before


def pg_snapshot(dsn: str) -> tuple[object, ...]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute("SELECT id, event_id FROM f ORDER BY id").fetchall()
        seq = conn.execute("SELECT last_value, is_called FROM f_id_seq").fetchone()
        tables = conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY 1"
        ).fetchall()
    return rows, seq, tables


@pytest.mark.postgres
def test_hostile_queries_leave_a_postgresql_database_unchanged(pg_url):
    dsn = pg_url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE f (id SERIAL PRIMARY KEY, event_id TEXT)")
        conn.execute("INSERT INTO f (event_id) VALUES ('evt_1'), ('evt_2')")
    before = pg_snapshot(dsn)
    assert count(pg_url, "SELECT count(*) FROM f WHERE event_id = :event_id") == 1
    reasons = []
    for query, error in PG_HOSTILE:
        with pytest.raises(error) as info:
            count(pg_url, query)
        reasons.append(str(info.value))
        assert pg_snapshot(dsn) == before, query
    assert "read-only transaction" in reasons[0]
    assert "tried to change the database" in reasons[0]
    assert "setval()" in reasons[1]
    # the session's default cannot be lifted by an earlier query either: a fresh probe still counts
    assert count(pg_url, "SELECT count(*) FROM f WHERE event_id = :event_id", "evt_2") == 1
