"""The matrix of a sweep: one run per target x database, one cell per run x experiment.

Everything here happens before a delivery is sent: targets are resolved (bad input is exit 3,
a remote endpoint exit 5), database URLs parsed, and each experiment checked against each
target on each database — one that cannot run there (``db-reset`` on SQLite) becomes a
*skipped* cell with the reason, not an error of the sweep. Each run gets its own seed,
derived from the sweep's seed, the target and the database, so runs sharing a database never
share an event id.

Passwords. A ``--db`` URL's password is held in memory only: records carry the URL
redacted (``user:***@``), and `SweepPlan.secrets` lists what the bundle writer must refuse
to write. A resumed sweep needs the URL passed again.
"""

from __future__ import annotations

import asyncio
import hashlib
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from acklab.evidence.documents.sweep import RunStatus, SweepDatabase, SweepDocument, SweepRunRecord
from acklab.evidence.documents.verdicts import Verdict
from acklab.evidence.errors import EvidenceError
from acklab.evidence.loading import load_evidence_json
from acklab.evidence.redaction import remember
from acklab.harness.core.plan import RunSettings
from acklab.harness.errors import SpecError
from acklab.harness.experiments import by_name
from acklab.harness.specs.credentials import redact, url_password, url_secrets
from acklab.harness.targets import resolve_target

FIXTURE_BACKENDS = ("sqlite", "postgresql")  # what the fixture runs on (app/db.py)
TEMP_SQLITE = "sqlite"  # --db value (and label) of the temporary SQLite default
SWEEP_FILE = "sweep.json"


@dataclass(frozen=True)
class Database:
    """One value of the database axis: the temporary SQLite default, or a URL."""

    label: str  # "sqlite", "postgresql@127.0.0.1:5432/db", or the URL with its password redacted
    url: str | None = field(default=None, repr=False)  # the real URL; never written

    @property
    def password(self) -> str | None:
        return url_password(self.url)

    def record(self) -> SweepDatabase:
        return SweepDatabase(label=self.label, url=redact(self.url) if self.url else None)


def parse_database(value: str) -> Database:
    """``sqlite`` (the temporary default) or a SQLAlchemy URL; exit 3 naming it when it is neither."""
    if value in (TEMP_SQLITE, ""):
        return Database(TEMP_SQLITE)
    try:
        backend = make_url(value).get_backend_name()
    except ArgumentError:
        backend = ""
    if backend not in FIXTURE_BACKENDS:
        raise SpecError(
            f"--db: got {redact(value)!r}; expected 'sqlite' (a temporary SQLite file) or a database URL "
            "such as postgresql+psycopg://user@127.0.0.1:5432/db"
        )
    parsed = make_url(value)
    if parsed.host:  # short and without the user: backend@host:port/database
        port = f":{parsed.port}" if parsed.port else ""
        return Database(f"{backend}@{parsed.host}{port}/{parsed.database or ''}", value)
    return Database(redact(value), value)


def parse_databases(values: Sequence[str]) -> tuple[Database, ...]:
    """The database axis, each value once; labels fall back to the redacted URL where they collide."""
    parsed = tuple(dict.fromkeys(parse_database(v) for v in (values or (TEMP_SQLITE,))))
    labels = [db.label for db in parsed]
    return tuple(
        Database(redact(db.url), db.url) if db.url and labels.count(db.label) > 1 else db for db in parsed
    )


def secrets_of(databases: Sequence[Database]) -> list[str]:
    """What no written byte may contain: each password, raw and URL-quoted, and each full URL."""
    found: set[str] = set()
    for db in databases:
        found |= url_secrets(db.url, context=(db.label,))
    remember(*found)
    return sorted(found)


def derive_seed(root: int, target: str, database: str) -> int:
    """The run's seed: a function of the sweep's seed and its cell's row (32 bits, like a run's)."""
    digest = hashlib.sha256(f"{root}|{target}|{database}".encode()).digest()
    return int.from_bytes(digest[:4], "big")


def new_sweep_id() -> str:
    return f"sweep-{datetime.now(UTC).strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"


@dataclass
class SweepRun:
    """One target on one database: an ordinary run bundle once it has run."""

    target: str  # --target as given
    target_name: str
    database: Database
    seed: int
    experiments: tuple[str, ...]  # applicable here, in the stable order
    skipped: dict[str, str] = field(default_factory=dict)  # experiment -> why it cannot run here
    run_id: str | None = None
    status: RunStatus = "pending"
    verdict: Verdict | None = None
    error: str | None = None

    @property
    def row(self) -> str:
        """The row of the summary and the heatmap: target and database."""
        return f"{self.target_name} \u00b7 {self.database.label}"

    def record(self) -> SweepRunRecord:
        return SweepRunRecord(
            target=self.target,
            target_name=self.target_name,
            database=self.database.label,
            seed=self.seed,
            experiments=list(self.experiments),
            run_id=self.run_id,
            bundle=self.run_id if self.status == "complete" else None,
            status=self.status,
            verdict=self.verdict,
            error=redact(self.error) if self.error else None,
        )


@dataclass
class SweepPlan:
    """The whole matrix, and where each run of it stands."""

    sweep_id: str
    seed: int
    trials: int
    targets: tuple[str, ...]
    databases: tuple[Database, ...]
    experiments: tuple[str, ...]
    settings: RunSettings
    runs: list[SweepRun]
    started_at: str
    resumed: bool = False

    @property
    def secrets(self) -> list[str]:
        return secrets_of(self.databases)


def _spec_database(kind: str | None) -> Database:
    return Database(f"{kind or 'own'} (target spec)")


def plan_runs(
    targets: Sequence[str],
    databases: Sequence[Database],
    experiments: Sequence[str],
    *,
    seed: int,
    allow_remote: bool,
) -> list[SweepRun]:
    """Resolve every target on every database and sort experiments into runnable and skipped."""
    if not targets:
        raise SpecError(
            "--target: none given; expected at least one (fixture:live, fixture:unsafe, a spec file)"
        )
    chosen = by_name(experiments)  # an unknown name is exit 3, with a suggestion
    runs: list[SweepRun] = []
    seen: dict[tuple[str, str], str] = {}
    for ref in dict.fromkeys(targets):
        axis = databases if ref.startswith("fixture:") else (None,)
        for db in axis:
            try:
                target = resolve_target(ref, db_url=db.url if db else None, allow_remote=allow_remote)
            except SpecError as exc:
                if str(exc).startswith("--target"):
                    raise
                raise SpecError(f"--target {ref!r}: {exc}") from exc
            try:
                database = db or _spec_database(target.database)
                why = {e.name: e.applicable(target) for e in chosen}
            finally:
                asyncio.run(target.aclose())
            key = (target.name, database.label)
            if key in seen:
                raise SpecError(
                    f"--target {ref!r}: {target.name} on {database.label} is already in the sweep "
                    f"(from {seen[key]!r}); give each target and database once"
                )
            seen[key] = ref
            runs.append(
                SweepRun(
                    target=ref,
                    target_name=target.name,
                    database=database,
                    seed=derive_seed(seed, target.name, database.label),
                    experiments=tuple(name for name, reason in why.items() if reason is None),
                    skipped={name: reason for name, reason in why.items() if reason is not None},
                )
            )
    for run in runs:
        if not run.experiments:
            run.status = "skipped"
    if all(run.status == "skipped" for run in runs):
        reasons = "; ".join(f"{r.row}: {next(iter(r.skipped.values()), '')}" for r in runs)
        raise SpecError(f"no experiment can run on any target and database of this sweep ({reasons})")
    return runs


def new_plan(
    *,
    targets: Sequence[str],
    databases: Sequence[str],
    experiments: Sequence[str],
    trials: int,
    seed: int | None,
    settings: RunSettings,
    allow_remote: bool,
    started_at: str,
) -> SweepPlan:
    """The plan of a new sweep (nothing is sent; exit 3/5 errors surface here)."""
    if trials < 1:
        raise SpecError(f"--trials: got {trials}; expected at least 1")
    parsed = parse_databases(databases)
    names = tuple(e.name for e in by_name(experiments))
    root_seed = seed if seed is not None else secrets.randbits(32)
    runs = plan_runs(targets, parsed, names, seed=root_seed, allow_remote=allow_remote)
    return SweepPlan(
        sweep_id=new_sweep_id(),
        seed=root_seed,
        trials=trials,
        targets=tuple(dict.fromkeys(targets)),
        databases=parsed,
        experiments=names,
        settings=settings,
        runs=runs,
        started_at=started_at,
    )


def _settings(recorded: dict[str, Any]) -> RunSettings:
    known = set(RunSettings.__dataclass_fields__)
    return RunSettings(**{k: v for k, v in recorded.items() if k in known})


def _rebind(recorded: Sequence[SweepDatabase], given: Sequence[str]) -> tuple[Database, ...]:
    """The recorded databases with their real URLs, from --db given again (passwords are not kept)."""
    offered = {redact(v): v for v in given if v != TEMP_SQLITE}
    out = []
    for db in recorded:
        url = db.url
        if url is None:
            out.append(Database(db.label))
        elif url in offered:
            out.append(Database(db.label, offered[url]))
        elif "***@" in url:
            raise SpecError(
                f"--resume: the sweep ran on {url!r}, whose password is never written; "
                "pass that URL again with --db"
            )
        else:
            out.append(Database(db.label, url))
    return tuple(out)


def load_plan(out: Path, sweep_id: str, databases: Sequence[str]) -> SweepPlan:
    """The plan of an interrupted sweep, from its sweep.json (exit 3 when there is none to resume)."""
    path = out / sweep_id / SWEEP_FILE
    if not path.is_file():
        raise SpecError(f"--resume {sweep_id!r}: no {path}; pass the same --out as the interrupted sweep")
    try:
        doc = SweepDocument.read(load_evidence_json(path), what=str(path))
    except (OSError, ValueError, EvidenceError) as exc:
        raise SpecError(f"--resume {sweep_id!r}: {path} is unreadable: {exc}") from exc
    if doc.status == "complete" and (path.parent / "manifest.json").is_file():
        raise SpecError(
            f"--resume {sweep_id!r}: that sweep is complete (verdict {doc.verdict}); nothing to resume"
        )
    dbs = _rebind(doc.databases, databases)
    by_label = {db.label: db for db in dbs}
    skipped: dict[tuple[str, str], dict[str, str]] = {}
    for cell in doc.cells:
        if cell.verdict == "skipped":
            skipped.setdefault((cell.target, cell.database), {})[cell.experiment] = cell.reason or ""
    runs = []
    for rec in doc.runs:
        database = by_label.get(rec.database) or Database(rec.database)
        run = SweepRun(
            target=rec.target,
            target_name=rec.target_name,
            database=database,
            seed=rec.seed,
            experiments=tuple(rec.experiments),
            skipped=skipped.get((rec.target_name, rec.database), {}),
            run_id=rec.run_id,
            status=rec.status,
            verdict=rec.verdict,
            error=rec.error,
        )
        if run.status == "error":  # the lab could not start it last time: try again
            run.status, run.error = "pending", None
        runs.append(run)
    return SweepPlan(
        sweep_id=sweep_id,
        seed=doc.seed,
        trials=doc.trials_per_experiment,
        targets=tuple(doc.targets),
        databases=dbs,
        experiments=tuple(doc.experiments),
        settings=_settings(doc.settings or {}),
        runs=runs,
        started_at=doc.started_at,
        resumed=True,
    )
