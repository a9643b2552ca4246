"""Reading an evidence directory: find bundles and summarise them without keeping whole documents.

Everything here is defensive: a bundle is evidence from a run that may have been
interrupted, hand-edited or tampered with, so a missing field or an unreadable file becomes
a visible problem on the page, never an exception that hides the rest of the evidence.
Documents are read bounded (`evidence.loading`: size, depth) and never through a symbolic
link; an incident is read as an outline (`console.outline`), whatever its size; and a bundle
that cannot be summarised at all shows as broken with the reason.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from acklab.evidence.documents.base import Document
from acklab.evidence.documents.comparison import ComparisonDocument
from acklab.evidence.documents.incident import IncidentHead
from acklab.evidence.documents.latency import Latency
from acklab.evidence.documents.records import Violation
from acklab.evidence.documents.run import RunDocument
from acklab.evidence.documents.sweep import SweepDocument
from acklab.evidence.documents.trail import TrailDocument
from acklab.evidence.loading import DocumentError, load_evidence_json

from .coerce import as_dict, as_str
from .identity import commit_of, revision_of, trail_runs
from .outline import Outline, OutlineError, outline

# Directories inside a bundle that only hold documents: never descend into them looking
# for nested bundles (with 10,000 incidents this keeps discovery to a handful of scandirs).
LEAF_DIRS = frozenset({"incidents", "trials", "reports"})
# sweep.json is written before a sweep's first run starts and its manifest only at the end,
# so it alone makes a sweep in progress visible.
MARKERS = ("manifest.json", "run.json", "trail.json", "sweep.json", "comparison.json")
# A merged bundle may hold thousands of incidents; a planted one millions of empty files.
MAX_INCIDENTS_PER_BUNDLE = 50_000
SAFE_KEY_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


@dataclass(frozen=True)
class IncidentSummary:
    """What the overview, heatmap and comparison need of one incident (or one run entry without one)."""

    bundle: str
    incident_id: str | None
    path: str | None
    run_id: str
    created_at: str
    sort_time: float
    target: str
    experiment: str
    seed: int | None
    verdict: str
    trials: int
    passed: int
    failed: int
    errors: int
    violations: int
    faulted: Latency | None = None
    clean: Latency | None = None
    error: str | None = None
    database: str | None = None  # the incident's target.database: sqlite, postgresql, ...
    revision: str | None = None  # the handler's revision (`console.identity`): with target, its identity
    commit: str | None = (
        None  # the commit the lab ran at (target.commit_sha), even where the revision is a handler hash
    )
    # effects outside the database (effects.smtp, effects.outbound): source -> violations of it
    sinks: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True)
class RunSummary:
    """The scalar fields of run.json."""

    run_id: str
    verdict: str
    status: str
    target: str
    seed: int | None
    started_at: str
    ended_at: str
    experiments: int


@dataclass(frozen=True)
class SweepSummary:
    """The scalar fields of sweep.json (the matrix itself is read on demand)."""

    sweep_id: str
    verdict: str
    status: str
    targets: int
    databases: int
    experiments: int
    runs: int
    started_at: str
    ended_at: str


@dataclass(frozen=True)
class ComparisonSummary:
    """The scalar fields of comparison.json: one plan (seed) run against several targets."""

    comparison_id: str
    seed: int | None
    targets: tuple[str, ...]
    runs: tuple[tuple[str, str, str], ...]  # (target, run_id, bundle directory)


@dataclass
class BundleSummary:
    """One bundle as the console lists it; documents themselves are loaded on demand."""

    key: str
    path: Path
    rel: str
    kind: str
    has_manifest: bool
    created_at: str
    sort_time: float
    ci: dict[str, str]
    run: RunSummary | None
    incidents: list[IncidentSummary]
    has_trail: bool
    reports: list[str]
    problems: list[str] = field(default_factory=list)
    sweep: SweepSummary | None = None
    comparison: ComparisonSummary | None = None
    # A repair flow's bundle: run id -> (role, checkpoint) of every lab run its trail names.
    flow_runs: dict[str, tuple[str, str]] = field(default_factory=dict)


def bundle_key(rel: str) -> str:
    """A URL- and file-name-safe key for a bundle's path relative to the evidence directory."""
    parts = [p for p in rel.split("/") if p]
    key = "~".join("".join(c if c in SAFE_KEY_CHARS else "_" for c in part) for part in parts)
    if not key or key[0] in "._-~":
        key = "b" + key
    return key


def safe_id(value: str) -> str:
    """An id usable in a URL path segment and a file name (a hand-edited incident may carry `../`)."""
    cleaned = "".join(c if c in SAFE_KEY_CHARS else "_" for c in value)
    return cleaned if cleaned and cleaned[0] not in "._-" else "i" + cleaned


def discover(root: Path) -> list[Path]:
    """Every bundle directory under `root` (a directory holding manifest, run or trail JSON)."""
    found: list[Path] = []
    stack = [root]
    while stack:
        directory = stack.pop()
        try:
            with os.scandir(directory) as it:
                entries = list(it)
        except OSError:
            continue
        names = {e.name for e in entries}
        is_bundle = any(m in names for m in MARKERS)
        if is_bundle:
            found.append(Path(directory))
        for entry in entries:
            # Symlinked directories are not followed: evidence must live inside the evidence dir.
            if entry.name.startswith(".") or not entry.is_dir(follow_symlinks=False):
                continue
            if is_bundle and entry.name in LEAF_DIRS:
                continue
            stack.append(Path(entry.path))
    return sorted(found)


def stat_sig(path: Path) -> tuple[int, int] | None:
    """(mtime_ns, size) of a regular file, None when absent (symlinks count as absent)."""
    try:
        st = path.lstat()  # one syscall: this runs for every bundle on every rescan
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size) if stat.S_ISREG(st.st_mode) else None


def listing_sig(directory: Path) -> tuple[tuple[str, int, int], ...]:
    """Names, mtimes and sizes of the regular files directly in `directory` (none if it is a link)."""
    if os.path.islink(directory):  # a symlinked incidents/ or reports/ would list files elsewhere
        return ()
    try:
        with os.scandir(directory) as it:
            out = []
            for entry in it:
                if entry.is_file(follow_symlinks=False):
                    st = entry.stat(follow_symlinks=False)
                    out.append((entry.name, st.st_mtime_ns, st.st_size))
    except OSError:
        return ()
    return tuple(sorted(out))


def cheap_signature(path: Path) -> tuple[Any, ...]:
    """Changes whenever a document the index summarises changes (re-summarise only then)."""
    return (
        tuple(stat_sig(path / m) for m in MARKERS),
        listing_sig(path / "incidents"),
        listing_sig(path / "reports"),
    )


def parse_time(value: Any) -> float | None:
    """Seconds since the epoch of an ISO-8601 timestamp, None when it is not one."""
    if not isinstance(value, str):
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.timestamp()


def read_json(path: Path) -> tuple[Any, str | None]:
    """(document, None) or (None, why it could not be read): bounded, never through a link."""
    try:
        return load_evidence_json(path, what=path.name), None
    except DocumentError as exc:
        return None, f"{path.name}: unreadable ({exc.problem})"


def is_regular(path: Path) -> bool:
    """A regular file, not a symbolic link to one (evidence is never read through a link)."""
    return stat_sig(path) is not None


OutlineOf = Callable[[Path], Outline]
UNKNOWN = "unknown"  # the verdict shown for a document that is not one the lab writes


def summarise_incident(
    key: str, rel: str, head: Any, fallback_time: float, *, outlined: Outline | None = None
) -> tuple[IncidentSummary, list[str]]:
    """The summary of one incident (its head: the document without its trials) and its problems.

    The verdict and the counts are those the incident records; an incident that is not one
    the lab writes (hand-edited, truncated) shows as such, with what is wrong, and no verdict.
    """
    faulted = outlined.faulted if outlined is not None else []
    clean = outlined.clean if outlined is not None else []
    doc, problems = IncidentHead.read_or_problems(head)
    if doc is None:
        summary = IncidentSummary(
            bundle=key,
            incident_id=safe_id(Path(rel).stem),
            path=rel,
            run_id="?",
            created_at="",
            sort_time=fallback_time,
            target="?",
            experiment="?",
            seed=None,
            verdict=UNKNOWN,
            trials=len(outlined.trials) if outlined is not None else 0,
            passed=0,
            failed=0,
            errors=0,
            violations=0,
            error="not an incident the lab writes: " + "; ".join(problems[:3]),
        )
        return summary, [
            f"{Path(rel).name}: does not validate ({problems[0] if problems else 'not an object'})"
        ]
    summary = IncidentSummary(
        bundle=key,
        incident_id=safe_id(doc.incident_id),
        path=rel,
        run_id=doc.run_id,
        created_at=doc.created_at,
        sort_time=parse_time(doc.created_at) or fallback_time,
        target=doc.target.name,
        experiment=doc.experiment.name,
        seed=doc.seed,
        verdict=doc.verdict,
        trials=doc.summary.trials,
        passed=doc.summary.passed,
        failed=doc.summary.failed,
        errors=doc.summary.errors,
        violations=len(doc.violations),
        faulted=Latency.of(faulted),
        clean=Latency.of(clean),
        database=doc.target.database,
        revision=revision_of(doc.target),
        commit=commit_of(doc.target),
        sinks=tuple((source, _sink_violations(doc.violations, source)) for source in doc.target.sinks or ()),
    )
    return summary, []


# Beside at-most-once-effect with its source: the invariants only the sinks can break.
# (every sink's effects can go out before a commit; only keyed calls can lack their key)
_SINK_INVARIANTS = {"calls": ("idempotent-outbound", "no-effect-without-commit")}


def _sink_violations(violations: list[Violation], source: str) -> int:
    also = _SINK_INVARIANTS.get(source, ("no-effect-without-commit",))
    return sum(1 for v in violations if v.source == source or v.invariant in also)


def summarise_run(run: RunDocument) -> RunSummary:
    """The scalar fields of run.json."""
    return RunSummary(
        run_id=run.run_id,
        verdict=run.verdict,
        status=run.status,
        target=run.target,
        seed=run.seed,
        started_at=run.started_at,
        ended_at=run.ended_at,
        experiments=len(run.experiments),
    )


def summarise_sweep(doc: SweepDocument) -> SweepSummary:
    """The scalar fields of sweep.json."""
    return SweepSummary(
        sweep_id=doc.sweep_id,
        verdict=doc.verdict,
        status=doc.status,
        targets=len(doc.targets),
        databases=len(doc.databases),
        experiments=len(doc.experiments),
        runs=len(doc.runs),
        started_at=doc.started_at,
        ended_at=doc.ended_at,
    )


def summarise_comparison(doc: ComparisonDocument) -> ComparisonSummary:
    """The scalar fields of comparison.json."""
    return ComparisonSummary(
        comparison_id=doc.comparison_id,
        seed=doc.seed,
        targets=tuple(doc.targets),
        runs=tuple((r.target, r.run_id, r.bundle) for r in doc.runs),
    )


def orphan_entries(
    key: str,
    run: RunDocument,
    covered: set[str],
    when: float,
    *,
    database: str | None,
    revision: str | None,
) -> list[IncidentSummary]:
    """run.json experiments without an incident file (the lab could not finish them, or skipped them)."""
    return [
        IncidentSummary(
            bundle=key,
            incident_id=None,
            path=None,
            run_id=run.run_id,
            created_at=run.ended_at or run.started_at,
            sort_time=parse_time(run.ended_at) or when,
            target=run.target,
            experiment=e.name,
            seed=run.seed,
            verdict=e.verdict,
            trials=e.trials,
            passed=0,
            failed=0,
            errors=0,
            violations=len(e.violations),
            # a skipped experiment has no error, only the reason it does not apply
            error=e.error or e.reason,
            database=database,
            revision=revision,
        )
        for e in run.experiments
        if (e.incident or "") not in covered
    ]


T = TypeVar("T", bound=Document)


def read_model(path: Path, model: type[T], problems: list[str]) -> T | None:
    """A bundle's document as `model`; None (and the reason among `problems`) when it is not one."""
    doc, why = read_json(path)
    if why:
        problems.append(why)
        return None
    found, wrong = model.read_or_problems(doc)
    if found is None:
        problems.append(f"{path.name}: does not validate ({wrong[0] if wrong else 'not an object'})")
    return found


def summarise_bundle(root: Path, path: Path, outline_of: OutlineOf = outline) -> BundleSummary:
    """Read a bundle's manifest, run.json and incidents into a BundleSummary; never raises.

    Whatever goes wrong (an unreadable directory, a document no limit anticipated) makes the
    bundle show as broken with the reason: one bad bundle never hides the others.
    """
    try:
        return _summarise_bundle(root, path, outline_of)
    except Exception as exc:  # the console must stay up whatever a bundle holds
        rel = path.relative_to(root).as_posix() if path != root else "."
        return BundleSummary(
            key=bundle_key(rel if rel != "." else path.name),
            path=path,
            rel=rel,
            kind="broken",
            has_manifest=False,
            created_at="",
            sort_time=0.0,
            ci={},
            run=None,
            incidents=[],
            has_trail=False,
            reports=[],
            problems=[f"the bundle cannot be read: {type(exc).__name__}: {exc}"],
        )


def _summarise_bundle(root: Path, path: Path, outline_of: OutlineOf) -> BundleSummary:
    rel = path.relative_to(root).as_posix() if path != root else "."
    key = bundle_key(rel if rel != "." else path.name)
    problems: list[str] = []
    mtime = path.lstat().st_mtime
    has_manifest = is_regular(path / "manifest.json")
    manifest = _read_manifest(path, problems) if has_manifest else {}
    run_doc = _read_optional(path / "run.json", RunDocument, problems)
    run = summarise_run(run_doc) if run_doc is not None else None
    incidents = _read_incidents(path, key, mtime, outline_of, problems)
    if run_doc is not None:
        incidents += _orphans(key, run_doc, incidents, mtime)
    sweep_doc = _read_optional(path / "sweep.json", SweepDocument, problems)
    sweep = summarise_sweep(sweep_doc) if sweep_doc is not None else None
    comparison_doc = _read_optional(path / "comparison.json", ComparisonDocument, problems)
    comparison = summarise_comparison(comparison_doc) if comparison_doc is not None else None
    trail_doc = _read_optional(path / "trail.json", TrailDocument, problems)
    flow_runs = trail_runs(trail_doc) if trail_doc is not None else {}
    created = (
        as_str(manifest.get("created_at"))
        or (run.started_at if run else "")
        or (sweep.started_at if sweep else "")
    )
    ci = {k: str(v) for k, v in as_dict(manifest.get("ci")).items() if isinstance(v, str | int)}
    return BundleSummary(
        key=key,
        path=path,
        rel=rel,
        kind=as_str(manifest.get("kind")) or _kind_by_documents(path),
        has_manifest=has_manifest,
        created_at=created,
        sort_time=parse_time(created) or mtime,
        ci=ci,
        run=run,
        incidents=incidents,
        has_trail=is_regular(path / "trail.json"),
        reports=[f"reports/{n}" for n, *_ in listing_sig(path / "reports")],
        problems=problems,
        sweep=sweep,
        comparison=comparison,
        flow_runs=flow_runs,
    )


def _read_manifest(path: Path, problems: list[str]) -> dict[str, Any]:
    doc, why = read_json(path / "manifest.json")
    if why:
        problems.append(why)
    return as_dict(doc)


def _read_optional(file: Path, model: type[T], problems: list[str]) -> T | None:
    """The document in `file` read with its model, or None when the bundle has no such file."""
    return read_model(file, model, problems) if is_regular(file) else None


def _read_incidents(
    path: Path, key: str, mtime: float, outline_of: OutlineOf, problems: list[str]
) -> list[IncidentSummary]:
    """The bundle's incidents/*.json, at most MAX_INCIDENTS_PER_BUNDLE, each outlined."""
    names = [name for name, *_ in listing_sig(path / "incidents") if name.endswith(".json")]
    if len(names) > MAX_INCIDENTS_PER_BUNDLE:
        problems.append(
            f"incidents/ holds {len(names):,} files; the console reads the first {MAX_INCIDENTS_PER_BUNDLE:,}"
        )
        names = names[:MAX_INCIDENTS_PER_BUNDLE]
    incidents: list[IncidentSummary] = []
    for name in names:
        try:
            outlined: Outline | None = outline_of(path / "incidents" / name)
        except OutlineError as exc:
            outlined = None
            problems.append(f"{name}: unreadable ({exc})")
        head = outlined.head if outlined is not None else None
        found, wrong = summarise_incident(key, f"incidents/{name}", head, mtime, outlined=outlined)
        incidents.append(found)
        if outlined is not None:
            problems += wrong
    return incidents


def _orphans(
    key: str, run_doc: RunDocument, incidents: list[IncidentSummary], mtime: float
) -> list[IncidentSummary]:
    """What run.json tells of failures no incident file covers."""
    covered = {i.path for i in incidents if i.path}
    # run.json does not name the database; a run uses one, so its incidents tell.
    databases = {i.database for i in incidents}
    database = databases.pop() if len(databases) == 1 else None
    revisions = {i.revision for i in incidents}  # likewise one handler
    revision = revisions.pop() if len(revisions) == 1 else None
    return orphan_entries(key, run_doc, covered, mtime, database=database, revision=revision)


def _kind_by_documents(path: Path) -> str:
    """A bundle without a manifest's kind: told by the document it holds."""
    for document, kind in (
        ("sweep.json", "sweep"),
        ("comparison.json", "comparison"),
        ("trail.json", "flow"),
    ):
        if is_regular(path / document):
            return kind
    return "run"
