"""A count the handler cannot redefine: the lab creates the fixture's schema, pins it, checks it.

A handler that owns the database it is counted from can make any count come out right: rename
``fulfillments`` and put a view in its place that shows one row per event to the lab's
read-only connection, or add a trigger that deletes the duplicates. So for a checkout it
serves (`harness.targets.checkout`), the lab:

* reads the head's models *as data* — a confined process started from the schema's checkout
  prints tables, columns, types and constraints as JSON (`DUMPER`); the lab never imports
  that code, and executes no SQL text it was given: it builds the tables itself
  (`build_metadata`, a fixed vocabulary of column types) and creates them before any server
  of the checkout starts;
* takes a fingerprint of what is there (`fingerprint`: SQLite's ``sqlite_master``;
  PostgreSQL's catalogs — relations and their columns, views, triggers, rules, functions,
  policies, event triggers, per-database settings);
* checks it before every count, in the count's own read transaction (`PinnedSqlProbe`), and
  once more at the end of the run. A difference is sticky (`SchemaPin.change`) and every
  trial judged from then on fails ``schema-unchanged``, naming what changed;
* holds the count to the table itself, not to an index that may disagree with it: a handler
  that turns on SQLite's ``writable_schema`` can edit ``sqlite_master`` behind the database's
  back (make an index partial, write rows, put the text back) and leave an index that misses
  rows the table holds. So every count is followed, in the same snapshot, by SQLite's
  ``integrity_check`` of each table it read (and their indexes), and PostgreSQL counts with
  index scans switched off, its indexes' definitions, flags and storage in the fingerprint.

On PostgreSQL the served checkout connects as a role of its own that owns nothing and holds
row privileges only (`served_role`): it cannot run DDL at all, and the pin is the second line.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import stat
import subprocess  # nosec B404
import sys
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Date,
    DateTime,
    Float,
    ForeignKeyConstraint,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    Numeric,
    SmallInteger,
    String,
    Table,
    Text,
    UniqueConstraint,
    create_engine,
    text,
)
from sqlalchemy.engine import URL, Connection, make_url
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.types import TypeEngine

from acklab.evidence.redaction import redact, remember
from acklab.harness.errors import HarnessError, ProbeError
from acklab.harness.procs.confinement import Confined, Confinement, Launch
from acklab.harness.targets.effects import RELATION_KINDS, SqlProbe, begin_snapshot, keys, pg_views_read

DUMP_TIMEOUT_S = 120
MAX_DUMP_BYTES = 1 << 20
NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
# `python -I -B -c DUMPER ROOT`: the models of checkout ROOT, printed as data.
DUMPER = """
import json, sys
from pathlib import Path
root = Path(sys.argv[1]).resolve()
sys.path.insert(0, str(root))
from acklab.app import models
if not Path(models.__file__).resolve().is_relative_to(root):
    sys.exit(f"acklab schema: refused: the models would come from {models.__file__}, not from {root}")
from sqlalchemy import UniqueConstraint
from sqlalchemy.types import TypeDecorator

def kind(t):
    while isinstance(t, TypeDecorator):
        t = t.impl_instance if hasattr(t, "impl_instance") else t.impl
    return {"type": type(t).__name__, "length": getattr(t, "length", None),
            "timezone": getattr(t, "timezone", None), "precision": getattr(t, "precision", None),
            "scale": getattr(t, "scale", None)}

tables = []
for table in models.Base.metadata.sorted_tables:
    auto = lambda c: c.autoincrement if isinstance(c.autoincrement, bool) else str(c.autoincrement)
    tables.append({
        "name": table.name,
        "columns": [{"name": c.name, **kind(c.type), "nullable": bool(c.nullable),
                     "primary_key": bool(c.primary_key), "autoincrement": auto(c)} for c in table.columns],
        "foreign_keys": [{"columns": [e.parent.name for e in fk.elements],
                          "references": [e.target_fullname for e in fk.elements]}
                         for fk in table.foreign_key_constraints],
        "indexes": [{"name": i.name, "columns": [c.name for c in i.columns], "unique": bool(i.unique)}
                    for i in table.indexes],
        "uniques": [{"name": u.name, "columns": [c.name for c in u.columns]}
                    for u in table.constraints if isinstance(u, UniqueConstraint)],
    })
print(json.dumps({"tables": tables}))
"""


class SchemaError(HarnessError):
    """The lab could not read, create or pin the fixture's schema (exit 4)."""


class SchemaChanged(ProbeError):
    """The pinned schema changed: no count read from it is taken (the trial fails schema-unchanged)."""


def _type(column: Mapping[str, Any], where: str) -> TypeEngine[Any]:
    kind = column.get("type")
    length, tz = column.get("length"), column.get("timezone")
    built: dict[str, TypeEngine[Any]] = {
        "Integer": Integer(),
        "BigInteger": BigInteger(),
        "SmallInteger": SmallInteger(),
        "Text": Text(),
        "Boolean": Boolean(),
        "Date": Date(),
        "Float": Float(),
        "LargeBinary": LargeBinary(),
        "DateTime": DateTime(timezone=bool(tz)),
        "String": String(int(length)) if isinstance(length, int) else String(),
        "Numeric": Numeric(column.get("precision"), column.get("scale")),
    }
    if kind not in built:
        raise SchemaError(
            f"{where}: column type {kind!r} is not one the lab creates ({', '.join(sorted(built))}); the "
            "lab pins the schema it builds itself"
        )
    return built[kind]


def _names(values: Iterable[Any], where: str) -> list[str]:
    names = [str(v) for v in values]
    bad = [n for n in names if not NAME.match(n)]
    if bad:
        raise SchemaError(f"{where}: refused name(s) {bad!r}; the lab creates plain identifiers only")
    return names


def build_metadata(doc: Any) -> MetaData:
    """The tables `doc` describes (the `DUMPER`'s output), built by the lab from a fixed vocabulary."""
    if not isinstance(doc, dict) or not isinstance(doc.get("tables"), list) or not doc["tables"]:
        raise SchemaError("the models' description holds no tables")
    metadata = MetaData()
    for entry in doc["tables"]:
        [name] = _names([entry.get("name")], "table")
        columns = []
        for column in entry.get("columns") or []:
            [col] = _names([column.get("name")], f"table {name}")
            auto = column.get("autoincrement", "auto")
            columns.append(
                Column(
                    col,
                    _type(column, f"{name}.{col}"),
                    primary_key=bool(column.get("primary_key")),
                    nullable=bool(column.get("nullable")),
                    autoincrement=auto if isinstance(auto, bool) else "auto",
                )
            )
        constraints: list[Any] = []
        for fk in entry.get("foreign_keys") or []:
            refs = [str(r) for r in fk.get("references") or []]
            _names([part for r in refs for part in r.split(".")], f"table {name} foreign key")
            constraints.append(ForeignKeyConstraint(_names(fk.get("columns") or [], name), refs))
        for unique in entry.get("uniques") or []:
            uname = unique.get("name")
            constraints.append(
                UniqueConstraint(
                    *_names(unique.get("columns") or [], name),
                    name=_names([uname], name)[0] if uname else None,
                )
            )
        table = Table(name, metadata, *columns, *constraints)
        for index in entry.get("indexes") or []:
            [iname] = _names([index.get("name")], f"table {name} index")
            Index(
                iname,
                *(table.c[c] for c in _names(index.get("columns") or [], name)),
                unique=bool(index.get("unique")),
            )
    return metadata


_DUMPS: dict[tuple[str, str], dict[str, Any]] = {}
_DUMPS_LOCK = threading.Lock()


def models_of(checkout: Path, confinement: Confinement) -> dict[str, Any]:
    """The models of `checkout` as data, printed by a confined process started from it (cached per
    checkout and content of its ``app/models.py``)."""
    models = checkout / "app" / "models.py"
    try:
        key = (str(checkout.resolve()), hashlib.sha256(models.read_bytes()).hexdigest())
    except OSError as exc:
        raise SchemaError(f"cannot read the models of {checkout}: {exc}") from exc
    with _DUMPS_LOCK:
        if key in _DUMPS:
            return _DUMPS[key]
    place = confinement.prepare(checkout, label="schema")
    try:
        launch = place.launch(
            Launch((sys.executable, "-I", "-B", "-c", DUMPER, str(place.root)), {}, place.root),
            network="loopback",
        )
        try:
            done = subprocess.run(  # nosec B603 - our interpreter, a fixed script, an argv list
                list(launch.argv),
                env=dict(launch.env),
                cwd=launch.cwd,
                capture_output=True,
                timeout=DUMP_TIMEOUT_S,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise SchemaError(f"reading the models of {checkout} took over {DUMP_TIMEOUT_S} s") from exc
    finally:
        place.close()
    out = done.stdout[:MAX_DUMP_BYTES]
    if done.returncode != 0 or len(done.stdout) > MAX_DUMP_BYTES:
        why = done.stderr.decode("utf-8", "replace").strip()[-800:]
        raise SchemaError(f"cannot read the models of {checkout} (exit {done.returncode}): {why}")
    try:
        doc: dict[str, Any] = json.loads(out)
    except ValueError as exc:
        raise SchemaError(f"the models of {checkout} did not print their description as JSON") from exc
    build_metadata(doc)  # refused here, before anything is created
    with _DUMPS_LOCK:
        _DUMPS[key] = doc
    return _DUMPS[key]


# -- fingerprints ----------------------------------------------------------------------------

Entry = tuple[str, str, str]  # (kind, name, definition)

_PG_QUERIES: tuple[tuple[str, str], ...] = (
    (
        "relation",
        "SELECT c.relkind, n.nspname || '.' || c.relname, 'owner ' || pg_get_userbyid(c.relowner) "
        "|| ' rls ' || c.relrowsecurity::text || '/' || c.relforcerowsecurity::text "
        "|| coalesce(' ' || pg_get_viewdef(c.oid), '') "
        "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg\\_toast%%' AND n.nspname NOT LIKE 'pg\\_temp\\_%%' "
        "AND c.relkind <> 't'",
    ),
    (
        "column",
        "SELECT 'column', n.nspname || '.' || c.relname || '.' || a.attname, "
        "format_type(a.atttypid, a.atttypmod) || CASE WHEN a.attnotnull THEN ' not null' ELSE '' END "
        "FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE a.attnum > 0 AND NOT a.attisdropped AND c.relkind IN ('r', 'p', 'v', 'm', 'f') AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg\\_toast%%' AND n.nspname NOT LIKE 'pg\\_temp\\_%%'",
    ),
    (
        "trigger",
        "SELECT 'trigger', t.tgrelid::regclass::text || '.' || t.tgname, "
        "pg_get_triggerdef(t.oid) || ' enabled ' || t.tgenabled::text FROM pg_trigger t WHERE NOT t.tgisinternal",
    ),
    (
        "rule",
        "SELECT 'rule', r.ev_class::regclass::text || '.' || r.rulename, pg_get_ruledef(r.oid) "
        "FROM pg_rewrite r JOIN pg_class c ON c.oid = r.ev_class JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg\\_toast%%' AND n.nspname NOT LIKE 'pg\\_temp\\_%%'",
    ),
    (
        "function",
        "SELECT 'function', n.nspname || '.' || p.proname || '(' || pg_get_function_identity_arguments(p.oid) "
        "|| ')', md5(coalesce(p.prosrc, '')) || ' owner ' || pg_get_userbyid(p.proowner) "
        "FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg\\_toast%%' AND n.nspname NOT LIKE 'pg\\_temp\\_%%'",
    ),
    (
        "policy",
        "SELECT 'policy', p.polrelid::regclass::text || '.' || p.polname, p.polcmd::text || ' ' || "
        "p.polpermissive::text || ' ' || p.polroles::text || ' ' || coalesce(pg_get_expr(p.polqual, p.polrelid), '') "
        "|| ' / ' || coalesce(pg_get_expr(p.polwithcheck, p.polrelid), '') FROM pg_policy p",
    ),
    (
        "event trigger",
        "SELECT 'event trigger', e.evtname, e.evtevent || ' ' || e.evtenabled::text FROM pg_event_trigger e",
    ),
    (
        "setting",
        "SELECT 'setting', coalesce(s.setrole::regrole::text, '*'), array_to_string(s.setconfig, ',') "
        "FROM pg_db_role_setting s WHERE s.setdatabase IN "
        "(0, (SELECT oid FROM pg_database WHERE datname = current_database()))",
    ),
    (
        "schema",
        "SELECT 'schema', n.nspname, pg_get_userbyid(n.nspowner) FROM pg_namespace n WHERE n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg\\_toast%%' AND n.nspname NOT LIKE 'pg\\_temp\\_%%'",
    ),
    ("extension", "SELECT 'extension', extname, extversion FROM pg_extension"),
    (
        # What an index holds is its definition and its flags (an index marked not ready stops
        # being maintained; one not valid is not read): pg_index, as the catalog says.
        "index definition",
        "SELECT 'index definition', n.nspname || '.' || c.relname, pg_get_indexdef(i.indexrelid) "
        "|| ' valid ' || i.indisvalid::text || ' ready ' || i.indisready::text || ' live ' || i.indislive::text "
        "|| ' unique ' || i.indisunique::text || ' immediate ' || i.indimmediate::text "
        "FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg\\_toast%%' "
        "AND n.nspname NOT LIKE 'pg\\_temp\\_%%'",
    ),
    (
        # A table or index rewritten (TRUNCATE, REINDEX, VACUUM FULL, CLUSTER) gets new storage.
        "storage",
        "SELECT 'storage', n.nspname || '.' || c.relname, pg_relation_filenode(c.oid)::text "
        "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.relkind IN ('r', 'p', 'i', 'm') "
        "AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg\\_toast%%' "
        "AND n.nspname NOT LIKE 'pg\\_temp\\_%%'",
    ),
)


@dataclass(frozen=True)
class Fingerprint:
    """What a database's schema holds, as sorted (kind, name, definition) entries."""

    entries: tuple[Entry, ...]

    @property
    def digest(self) -> str:
        return hashlib.sha256(json.dumps(self.entries).encode("utf-8")).hexdigest()

    def changes(self, now: Fingerprint) -> list[str]:
        """What differs in `now`, one line each: "view fulfillments: new", "table fulfillments: gone"."""
        before = {(k, n): d for k, n, d in self.entries}
        after = {(k, n): d for k, n, d in now.entries}
        lines = [f"{k} {n}: gone" for (k, n) in sorted(before.keys() - after.keys())]
        lines += [f"{k} {n}: new" for (k, n) in sorted(after.keys() - before.keys())]
        lines += [
            f"{k} {n}: changed"
            for (k, n) in sorted(before.keys() & after.keys())
            if before[k, n] != after[k, n]
        ]
        return lines


def fingerprint(conn: Connection) -> Fingerprint:
    """The schema seen by `conn` (SQLite or PostgreSQL)."""
    if conn.dialect.name == "sqlite":
        rows = conn.exec_driver_sql(
            "SELECT type, name, coalesce(tbl_name, '') || ': ' || coalesce(sql, '') FROM sqlite_master"
        )
        entries = [(str(k), str(n), str(d)) for k, n, d in rows]
    else:
        entries = []
        for _, query in _PG_QUERIES:
            for kind, name, definition in conn.exec_driver_sql(query):
                entries.append((RELATION_KINDS.get(str(kind), str(kind)), str(name), str(definition)))
    return Fingerprint(tuple(sorted(entries)))


INTEGRITY_PROBLEMS_SHOWN = 3


def integrity_problems(conn: Connection, tables: Iterable[str]) -> list[str]:
    """What SQLite's ``integrity_check`` finds wrong with `tables` and their indexes (rows an index
    misses, entries it holds for no row, broken pages); [] when nothing, or on PostgreSQL (where
    the fingerprint holds the indexes' definitions and flags, and counts scan the table)."""
    if conn.dialect.name != "sqlite":
        return []
    found: list[str] = []
    for table in sorted(set(tables)):
        quoted = '"' + table.replace('"', '""') + '"'
        # quick_check does not compare an index with its table: integrity_check of the table does.
        rows = conn.exec_driver_sql(f"PRAGMA main.integrity_check({quoted})").scalars().all()
        found += [f"{table}: {row}" for row in rows if str(row) != "ok"]
    return found


@dataclass
class SchemaPin:
    """The fingerprint the lab took of the schema it created, and the first change seen since."""

    expected: Fingerprint
    change: str | None = None
    # SQLite: (device, inode) of the database file the lab created; a file put in its place is a change.
    file: tuple[int, int] | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def check_file(self, path: Path, *, what: str) -> None:
        if self.file is None:
            return
        try:
            info = path.lstat()
        except OSError:
            self.broken(f"the database file {path.name} is gone", what=what)
        if stat.S_ISLNK(info.st_mode) or (info.st_dev, info.st_ino) != self.file:
            self.broken(f"the database file {path.name} was replaced", what=what)

    def check(self, now: Fingerprint, *, what: str) -> None:
        """SchemaChanged (the change remembered) when `now` is not the pinned fingerprint, or when a
        change was seen before (a schema changed back proves nothing)."""
        if now != self.expected:
            self.broken("; ".join(self.expected.changes(now)[:12]) or "the schema changed", what=what)
        if self.change is not None:
            self.broken(self.change, what=what)

    def check_integrity(self, problems: list[str], *, what: str) -> None:
        """SchemaChanged when the database's own check found its tables and indexes at odds."""
        if problems:
            shown = "; ".join(problems[:INTEGRITY_PROBLEMS_SHOWN])
            more = len(problems) - INTEGRITY_PROBLEMS_SHOWN
            self.broken(
                f"the database's integrity check failed ({shown}{f'; {more} more' if more > 0 else ''}): "
                "a count through an index would not read what the table holds",
                what=what,
            )

    def broken(self, change: str, *, what: str) -> None:
        with self._lock:
            if self.change is None:
                self.change = change
        raise SchemaChanged(
            f"{what}: the schema the lab pinned changed ({self.change}); no count is taken from it"
        )


class PinnedSqlProbe(SqlProbe):
    """`SqlProbe` whose every count is taken in one read transaction with the pinned schema's check:
    the fingerprint before it (and on PostgreSQL after it, with the relations the count locked),
    the integrity of the tables it read after it (SQLite), no index scan (PostgreSQL)."""

    def __init__(self, url: str, query: str, pin: SchemaPin) -> None:
        super().__init__(url, query)
        self.pin = pin
        self._counted: set[str] = set()  # the tables counts read: checked again at the end

    def _read(self, conn: Connection, event_id: str, object_id: str | None = None) -> Any:
        raw = conn.connection.dbapi_connection
        if conn.dialect.name == "sqlite":
            self.pin.check_file(Path(self._url.database or ""), what=f"before counting {event_id}")
            begin_snapshot(conn)  # one snapshot (WAL) for the fingerprint, the count and the check
        self.pin.check(fingerprint(conn), what=f"before counting {event_id}")
        if conn.dialect.name == "postgresql":
            # A plain scan of the table: no index (whatever it holds) answers for the count.
            for scan in ("indexscan", "indexonlyscan", "bitmapscan"):
                conn.exec_driver_sql(f"SET LOCAL enable_{scan} = off")
        read: set[str] = getattr(raw, "tables_read", set())
        read.clear()
        value = conn.execute(self._query, keys(event_id, object_id)).scalar()
        if conn.dialect.name == "sqlite":
            tables = set(read)
            self._counted |= tables
            self.pin.check_integrity(integrity_problems(conn, tables), what=f"counting {event_id}")
        if conn.dialect.name == "postgresql":
            views = pg_views_read(conn)
            self.pin.check(fingerprint(conn), what=f"after counting {event_id}")
            if views:
                self.pin.broken(f"the count of {event_id} read {', '.join(views)}", what="counting")
        return value

    def recheck(self) -> None:
        """The end-of-run check: SchemaChanged when the schema is no longer the pinned one, or a
        table a count read no longer agrees with its indexes."""
        with self._reads.connect() as conn:
            if conn.dialect.name == "sqlite":
                begin_snapshot(conn)
            self.pin.check(fingerprint(conn), what="at the end of the run")
            self.pin.check_integrity(integrity_problems(conn, self._counted), what="at the end of the run")
            conn.rollback()


# -- creating it -----------------------------------------------------------------------------


def create_schema(url: str, doc: Mapping[str, Any]) -> Fingerprint:
    """Create the tables `doc` describes on `url` (as the lab's own user) and fingerprint the result."""
    metadata = build_metadata(doc)
    engine = create_engine(_driver(make_url(url)))
    try:
        with engine.begin() as conn:
            metadata.create_all(conn)
        with engine.connect() as conn:
            pinned = fingerprint(conn)
    except SQLAlchemyError as exc:
        raise SchemaError(
            f"the lab could not create the fixture's schema: {redact(str(getattr(exc, 'orig', exc)))}"
        ) from exc
    finally:
        engine.dispose()
    return pinned


def _driver(url: URL) -> URL:
    return url.set(drivername="postgresql+psycopg") if url.get_backend_name() == "postgresql" else url


@dataclass
class ServedRole:
    """A PostgreSQL role for the served checkout: rows only, no DDL, owns nothing (dropped after)."""

    admin_url: str
    name: str
    url: str = field(repr=False)

    def drop(self) -> None:
        engine = create_engine(_driver(make_url(self.admin_url)), isolation_level="AUTOCOMMIT")
        try:
            with engine.connect() as conn:
                conn.exec_driver_sql(f'DROP OWNED BY "{self.name}"')
                conn.exec_driver_sql(f'DROP ROLE IF EXISTS "{self.name}"')
        except SQLAlchemyError:  # the database may be gone already; the role owns nothing
            pass
        finally:
            engine.dispose()


def served_role(admin_url: str) -> ServedRole:
    """Create the served checkout's role on `admin_url`'s database, with row privileges only."""
    parsed = make_url(admin_url)
    name = f"acklab_served_{secrets.token_hex(6)}"
    password = secrets.token_urlsafe(24)
    remember(password)
    database = parsed.database or "postgres"
    engine = create_engine(_driver(parsed), isolation_level="AUTOCOMMIT")
    statements = [
        f"CREATE ROLE \"{name}\" LOGIN PASSWORD '{password}' NOSUPERUSER NOCREATEDB NOCREATEROLE NOINHERIT "
        "NOREPLICATION NOBYPASSRLS CONNECTION LIMIT 200",
        f'GRANT CONNECT ON DATABASE "{database}" TO "{name}"',
        f'GRANT USAGE ON SCHEMA public TO "{name}"',
        f'GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO "{name}"',
        f'GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA public TO "{name}"',
    ]
    try:
        with engine.connect() as conn:
            for statement in statements:
                conn.execute(text(statement))
            creates = (
                conn.execute(
                    text(
                        "SELECT n.nspname FROM pg_namespace n WHERE has_schema_privilege(:role, n.oid, 'CREATE') "
                        "AND n.nspname NOT LIKE 'pg\\_%' AND n.nspname <> 'information_schema'"
                    ),
                    {"role": name},
                )
                .scalars()
                .all()
            )
    except SQLAlchemyError as exc:
        raise SchemaError(
            f"the lab could not create the served checkout's role on {redact(parsed.render_as_string(hide_password=True))} "
            f"({redact(str(getattr(exc, 'orig', exc)))}); the lab's user needs CREATEROLE there"
        ) from exc
    finally:
        engine.dispose()
    role = ServedRole(
        admin_url, name, parsed.set(username=name, password=password).render_as_string(hide_password=False)
    )
    if creates:
        role.drop()
        raise SchemaError(
            f"a role with row privileges only could still create objects in schema(s) {sorted(creates)} of "
            f"{database!r}; run REVOKE CREATE ON SCHEMA {creates[0]} FROM PUBLIC on that database"
        )
    return role


def hand_over(database: Path, place: Confined) -> tuple[int, int]:
    """Give the SQLite file the lab created to the owner of the place's scratch directory; the
    file's (device, inode), which the pin holds it to."""
    owner = place.scratch.stat()
    for path in database.parent.glob(database.name + "*"):
        os.chown(path, owner.st_uid, owner.st_gid)
    info = database.stat()
    return info.st_dev, info.st_ino
