"""A count the handler cannot redefine (harness/targets/schema_pin.py), on SQLite and PostgreSQL.

The lab creates the fixture's schema from the models (as data, never imported), pins its
fingerprint, checks it before every count and at the end of the run, and on PostgreSQL serves the
checkout as a role with row privileges only. The handlers that try to redefine the count are
round two's (tests/flows/hostile_two.py), served from a checkout by `acklab run --checkout`.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import pytest
from sqlalchemy import create_engine, text

from acklab.flows.sandbox import choose
from acklab.harness.engine.runner import RunOptions, run
from acklab.harness.errors import SpecError
from acklab.harness.targets.effects import SqlProbe
from acklab.harness.targets.schema_pin import (
    PinnedSqlProbe,
    SchemaChanged,
    SchemaPin,
    create_schema,
    fingerprint,
    models_of,
)
from tests.flows import hostile_ground, hostile_two
from tests.harness.test_checkout_target import checkout

P = TypeVar("P", bound=SqlProbe)

ROOT = Path(__file__).resolve().parents[2]
COUNT = "SELECT count(*) FROM fulfillments WHERE event_id = :event_id"


def attack(tmp_path: Path, handler: str, db: str | None = None):
    copy = checkout(tmp_path / "checkout", handler)
    return run(
        RunOptions(
            target="fixture:live",
            checkout=copy,
            db=db,
            experiments=("lost-ack",),
            trials=1,
            seed=11,
            out=tmp_path / "out",
            confinement=choose(),
        )
    )


def invariants(result) -> set[str]:
    return {v["invariant"] for e in result.run["experiments"] for v in e["violations"]}


@pytest.mark.slow  # a real run: the checkout served confined, then attacked
def test_on_sqlite_a_view_in_the_tables_place_fails_schema_unchanged(tmp_path):
    result = attack(tmp_path, hostile_two.VIEW_SOURCE)
    assert int(result.exit_code) == 1
    found = [
        v for e in result.run["experiments"] for v in e["violations"] if v["invariant"] == "schema-unchanged"
    ]
    assert found
    assert "table fulfillments: gone" in found[0]["observed"]
    assert "view fulfillments: new" in found[0]["observed"]


@pytest.mark.slow  # a real run: the checkout served confined, then attacked
def test_on_sqlite_a_trigger_fails_schema_unchanged(tmp_path):
    result = attack(tmp_path, hostile_two.TRIGGER_SOURCE)
    assert "schema-unchanged" in invariants(result)


@pytest.mark.parametrize("source", ["view", "trigger"])
def test_on_postgres_the_served_role_can_run_no_ddl(source, tmp_path, pg_url):
    handler = {"view": hostile_two.VIEW_SOURCE, "trigger": hostile_two.TRIGGER_SOURCE}[source]
    result = attack(tmp_path, handler, db=pg_url)
    # The DDL was refused, the patch fell back to double-fulfilling, and the count saw it.
    assert int(result.exit_code) == 1
    assert "at-most-once-effect" in invariants(result)
    assert "schema-unchanged" not in invariants(result)
    engine = create_engine(pg_url.replace("postgresql+psycopg", "postgresql+psycopg"))
    with engine.connect() as conn:
        kinds: dict[str, str] = dict(
            conn.execute(
                text(
                    "SELECT relname, relkind FROM pg_class WHERE relname IN ('fulfillments', 'fulfillment_log') AND relkind IN ('r', 'v', 'm')"
                )
            ).all()
        )
        triggers = conn.execute(text("SELECT count(*) FROM pg_trigger WHERE NOT tgisinternal")).scalar()
        roles = conn.execute(
            text("SELECT count(*) FROM pg_roles WHERE rolname LIKE 'acklab_served_%'")
        ).scalar()
    engine.dispose()
    assert kinds == {"fulfillments": "r"}
    assert triggers == 0
    assert roles == 0  # the served role is dropped with the run


def counted(probe: SqlProbe, event_id: str = "evt_1") -> int:
    """One count, in the caller's thread."""
    return probe.count_now(event_id)


@contextmanager
def closing(probe: P) -> Iterator[P]:
    """`probe`, every connection it opened closed once the block ends (whatever it raised)."""
    try:
        yield probe
    finally:
        asyncio.run(probe.aclose())


def models() -> dict:
    return models_of(ROOT, choose())


def test_every_kind_of_change_is_named(tmp_path, pg_url):
    for url in (f"sqlite:///{tmp_path / 'f.db'}", pg_url):
        pinned = create_schema(url, models())
        engine = create_engine(url)
        changes = {
            "view": "CREATE VIEW v AS SELECT 1 AS x",
            "trigger": (
                "CREATE TRIGGER t AFTER INSERT ON orders BEGIN SELECT 1; END"
                if url.startswith("sqlite")
                else "CREATE FUNCTION f() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$"
            ),
        }
        if not url.startswith("sqlite"):
            changes["policy"] = "CREATE POLICY p ON fulfillments USING (false)"
            changes["rls"] = "ALTER TABLE fulfillments ENABLE ROW LEVEL SECURITY"
        for kind, ddl in changes.items():
            with engine.begin() as conn:
                conn.exec_driver_sql(ddl)
            with engine.connect() as conn:
                now = fingerprint(conn)
            assert now != pinned, kind
            assert pinned.changes(now), kind
            pinned = now
        engine.dispose()


def test_a_pinned_probe_refuses_to_count_a_changed_schema(tmp_path):
    url = f"sqlite:///{tmp_path / 'f.db'}"
    pin = SchemaPin(create_schema(url, models()))
    with closing(PinnedSqlProbe(url, COUNT, pin)) as probe:
        assert counted(probe) == 0
        with sqlite3.connect(tmp_path / "f.db") as conn:
            conn.execute("ALTER TABLE fulfillments RENAME TO fulfillment_log")
        with pytest.raises(SchemaChanged, match="table fulfillments: gone"):
            counted(probe)
        with sqlite3.connect(tmp_path / "f.db") as conn:
            conn.execute("ALTER TABLE fulfillment_log RENAME TO fulfillments")
        with pytest.raises(SchemaChanged):  # changed back: a change once seen stays seen
            counted(probe)
    assert pin.change is not None


def test_a_database_file_put_in_the_pinned_ones_place_is_a_change(tmp_path):
    url = f"sqlite:///{tmp_path / 'f.db'}"
    created = create_schema(url, models())
    info = (tmp_path / "f.db").stat()
    pin = SchemaPin(created, file=(info.st_dev, info.st_ino))
    other = tmp_path / "other.db"
    create_schema(f"sqlite:///{other}", models())
    other.replace(tmp_path / "f.db")  # the same schema, another file
    with (
        closing(PinnedSqlProbe(url, COUNT, pin)) as probe,
        pytest.raises(SchemaChanged, match="was replaced"),
    ):
        counted(probe)


def test_a_count_through_a_view_is_refused(tmp_path, pg_url):
    for url in (f"sqlite:///{tmp_path / 'f.db'}", pg_url):
        create_schema(url, models())
        engine = create_engine(url)
        with engine.begin() as conn:
            conn.exec_driver_sql("CREATE VIEW one_per_event AS SELECT * FROM fulfillments")
        engine.dispose()
        view = SqlProbe(url, "SELECT count(*) FROM one_per_event WHERE event_id = :event_id")
        with (
            closing(view),
            pytest.raises(SpecError, match=r"reads through .*one_per_event.*base tables only"),
        ):
            counted(view)
        with closing(SqlProbe(url, COUNT)) as table:
            assert counted(table) == 0  # the table itself is counted


@pytest.mark.slow  # a real run: the checkout served confined, then attacked
def test_on_sqlite_an_index_that_misses_rows_fails_schema_unchanged(tmp_path):
    # writable_schema: the index made partial around each duplicate, its text put back after.
    result = attack(tmp_path, hostile_ground.INDEX_SOURCE)
    assert int(result.exit_code) == 1
    found = [
        v for e in result.run["experiments"] for v in e["violations"] if v["invariant"] == "schema-unchanged"
    ]
    assert found, result.run["experiments"]
    assert "missing from index ix_fulfillments_order_id" in found[0]["observed"]


def test_a_pinned_count_reads_the_table_and_checks_its_indexes(tmp_path):
    url = f"sqlite:///{tmp_path / 'f.db'}"
    pin = SchemaPin(create_schema(url, models()))
    query = "SELECT count(*) FROM fulfillments WHERE order_id = :event_id"
    with closing(PinnedSqlProbe(url, query, pin)) as probe:
        assert counted(probe, "ord_1") == 0
    with sqlite3.connect(tmp_path / "f.db", isolation_level=None) as conn:
        conn.execute(
            "INSERT INTO orders (order_id, status, amount_cents, currency, updated_at) VALUES ('ord_1', 'paid', 1, 'EUR', '2026-01-01')"
        )
        insert = "INSERT INTO fulfillments (event_id, order_id, amount_cents, currency, created_at) VALUES (?, 'ord_1', 1, 'EUR', '2026-01-01')"
        conn.execute(insert, ("evt_1",))
        index = conn.execute(
            "SELECT sql FROM sqlite_master WHERE name = 'ix_fulfillments_order_id'"
        ).fetchone()[0]
        for definition in (index + " WHERE 0", index):
            conn.execute("PRAGMA writable_schema = ON")
            conn.execute(
                "UPDATE sqlite_master SET sql = ? WHERE name = 'ix_fulfillments_order_id'", (definition,)
            )
            conn.execute("PRAGMA writable_schema = RESET")
            if definition != index:
                conn.execute(insert, ("evt_2",))  # a row the index never hears of
        through_index = conn.execute("SELECT count(*) FROM fulfillments WHERE order_id = 'ord_1'").fetchone()[
            0
        ]
    assert through_index == 1  # what the count used to read: sqlite_master is as pinned
    # A probe of its own: none of its connections read the schema before it was rewritten.
    with closing(PinnedSqlProbe(url, query, pin)) as probe:
        with pytest.raises(SchemaChanged, match="missing from index ix_fulfillments_order_id"):
            counted(probe, "ord_1")
        with pytest.raises(SchemaChanged):
            probe.recheck()  # and at the end of the run
    assert pin.change is not None
    assert "integrity check failed" in pin.change


def test_on_postgres_an_index_swapped_or_a_table_rewritten_is_a_change(pg_url):
    pinned = create_schema(pg_url, models())
    engine = create_engine(pg_url)
    for ddl in (
        "DROP INDEX ix_fulfillments_order_id; CREATE INDEX ix_fulfillments_order_id ON fulfillments (order_id) WHERE false",
        "TRUNCATE fulfillments CASCADE",
    ):
        with engine.begin() as conn:
            conn.exec_driver_sql(ddl)
        with engine.connect() as conn:
            now = fingerprint(conn)
        assert pinned.changes(now), ddl
        pinned = now
    engine.dispose()
    with closing(PinnedSqlProbe(pg_url, COUNT, SchemaPin(pinned))) as probe:
        assert counted(probe) == 0  # unchanged since: counted, with index scans off
