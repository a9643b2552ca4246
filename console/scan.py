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
from typing import Any

from acklab.evidence.loading import DocumentError, load_evidence_json

from .coerce import as_dict, as_int, as_list, as_str
from .identity import revision_of, trail_runs
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
class Latency:
    """Latency figures of a group of deliveries, in milliseconds."""

    count: int
    p50: float
    p95: float
    max: float


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


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile of a non-empty list."""
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(q * len(ordered) + 0.5)))
    return ordered[rank - 1]


def latency(values: list[float]) -> Latency | None:
    if not values:
        return None
    return Latency(len(values), percentile(values, 0.5), percentile(values, 0.95), max(values))


def deliveries_of(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Every delivery of every trial of an incident."""
    return [
        d
        for t in as_list(doc.get("trials"))
        for d in as_list(as_dict(t).get("deliveries"))
        if isinstance(d, dict)
    ]


def is_faulted(delivery: dict[str, Any]) -> bool:
    fault = delivery.get("fault")
    return isinstance(fault, str) and fault not in ("", "none")


def summarise_incident(
    key: str, rel: str, doc: Any, fallback_time: float, *, outlined: Outline | None = None
) -> IncidentSummary:
    """The summary of one incident (a whole document, or an outline's head), tolerant of odd fields."""
    d = as_dict(outlined.head if outlined is not None else doc)
    summary = as_dict(d.get("summary"))
    faulted: list[float] = []
    clean: list[float] = []
    if outlined is not None:
        faulted, clean, trial_count = outlined.faulted, outlined.clean, len(outlined.trials)
    else:
        trial_count = len(as_list(d.get("trials")))
        for delivery in deliveries_of(d):
            value = delivery.get("latency_ms")
            if isinstance(value, int | float) and not isinstance(value, bool):
                (faulted if is_faulted(delivery) else clean).append(float(value))
    created = as_str(d.get("created_at"))
    seed = d.get("seed")
    return IncidentSummary(
        bundle=key,
        incident_id=safe_id(as_str(d.get("incident_id")) or Path(rel).stem),
        path=rel,
        run_id=as_str(d.get("run_id"), "?"),
        created_at=created,
        sort_time=parse_time(created) or fallback_time,
        target=as_str(as_dict(d.get("target")).get("name"), "?"),
        experiment=as_str(as_dict(d.get("experiment")).get("name"), "?"),
        seed=seed if isinstance(seed, int) and not isinstance(seed, bool) else None,
        verdict=as_str(d.get("verdict"), "unknown"),
        trials=as_int(summary.get("trials"), trial_count),
        passed=as_int(summary.get("passed")),
        failed=as_int(summary.get("failed")),
        errors=as_int(summary.get("errors")),
        violations=len(as_list(d.get("violations"))),
        faulted=latency(faulted),
        clean=latency(clean),
        database=as_str(as_dict(d.get("target")).get("database")) or None,
        revision=revision_of(d.get("target")),
    )


def summarise_run(doc: Any) -> RunSummary:
    """The scalar fields of a run.json document, tolerant of missing or mistyped fields."""
    d = as_dict(doc)
    seed = d.get("seed")
    return RunSummary(
        run_id=as_str(d.get("run_id"), "?"),
        verdict=as_str(d.get("verdict"), "unknown"),
        status=as_str(d.get("status"), "unknown"),
        target=as_str(d.get("target"), "?"),
        seed=seed if isinstance(seed, int) and not isinstance(seed, bool) else None,
        started_at=as_str(d.get("started_at")),
        ended_at=as_str(d.get("ended_at")),
        experiments=len(as_list(d.get("experiments"))),
    )


def summarise_sweep(doc: Any) -> SweepSummary:
    """The scalar fields of a sweep.json document, tolerant of missing or mistyped fields."""
    d = as_dict(doc)
    return SweepSummary(
        sweep_id=as_str(d.get("sweep_id"), "?"),
        verdict=as_str(d.get("verdict"), "unknown"),
        status=as_str(d.get("status"), "unknown"),
        targets=len(as_list(d.get("targets"))),
        databases=len(as_list(d.get("databases"))),
        experiments=len(as_list(d.get("experiments"))),
        runs=len(as_list(d.get("runs"))),
        started_at=as_str(d.get("started_at")),
        ended_at=as_str(d.get("ended_at")),
    )


def summarise_comparison(doc: Any) -> ComparisonSummary:
    """The scalar fields of a comparison.json document, tolerant of missing or mistyped fields."""
    d = as_dict(doc)
    seed = d.get("seed")
    runs = tuple(
        (as_str(r.get("target"), "?"), as_str(r.get("run_id"), "?"), as_str(r.get("bundle")))
        for r in map(as_dict, as_list(d.get("runs")))
    )
    return ComparisonSummary(
        comparison_id=as_str(d.get("comparison_id"), "?"),
        seed=seed if isinstance(seed, int) and not isinstance(seed, bool) else None,
        targets=tuple(as_str(t, "?") for t in as_list(d.get("targets"))),
        runs=runs,
    )


def orphan_entries(
    key: str,
    run_doc: Any,
    run: RunSummary,
    covered: set[str],
    when: float,
    *,
    database: str | None,
    revision: str | None,
) -> list[IncidentSummary]:
    """run.json experiments without an incident file (the lab could not finish them)."""
    out = []
    for entry in as_list(as_dict(run_doc).get("experiments")):
        e = as_dict(entry)
        if not e or as_str(e.get("incident")) in covered:
            continue
        out.append(
            IncidentSummary(
                bundle=key,
                incident_id=None,
                path=None,
                run_id=run.run_id,
                created_at=run.ended_at or run.started_at,
                sort_time=parse_time(run.ended_at) or when,
                target=run.target,
                experiment=as_str(e.get("name"), "?"),
                seed=run.seed,
                verdict=as_str(e.get("verdict"), "unknown"),
                trials=as_int(e.get("trials")),
                passed=0,
                failed=0,
                errors=0,
                violations=len(as_list(e.get("violations"))),
                # a skipped experiment has no error, only the reason it does not apply
                error=as_str(e.get("error") or e.get("reason")) or None,
                database=database,
                revision=revision,
            )
        )
    return out


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
    manifest: dict[str, Any] = {}
    has_manifest = is_regular(path / "manifest.json")
    if has_manifest:
        doc, why = read_json(path / "manifest.json")
        manifest = as_dict(doc)
        if why:
            problems.append(why)
    run: RunSummary | None = None
    run_doc: Any = None
    if is_regular(path / "run.json"):
        run_doc, why = read_json(path / "run.json")
        run = summarise_run(run_doc)
        if why:
            problems.append(why)
    incidents: list[IncidentSummary] = []
    names = [name for name, *_ in listing_sig(path / "incidents") if name.endswith(".json")]
    if len(names) > MAX_INCIDENTS_PER_BUNDLE:
        problems.append(
            f"incidents/ holds {len(names):,} files; the console reads the first {MAX_INCIDENTS_PER_BUNDLE:,}"
        )
        names = names[:MAX_INCIDENTS_PER_BUNDLE]
    for name in names:
        try:
            outlined: Outline | None = outline_of(path / "incidents" / name)
        except OutlineError as exc:
            outlined = None
            problems.append(f"{name}: unreadable ({exc})")
        incidents.append(summarise_incident(key, f"incidents/{name}", None, mtime, outlined=outlined))
    if run is not None:
        covered = {i.path for i in incidents if i.path}
        # run.json does not name the database; a run uses one, so its incidents tell.
        databases = {i.database for i in incidents}
        database = databases.pop() if len(databases) == 1 else None
        revisions = {i.revision for i in incidents}  # likewise one handler
        revision = revisions.pop() if len(revisions) == 1 else None
        incidents += orphan_entries(key, run_doc, run, covered, mtime, database=database, revision=revision)
    sweep: SweepSummary | None = None
    if is_regular(path / "sweep.json"):
        sweep_doc, why = read_json(path / "sweep.json")
        sweep = summarise_sweep(sweep_doc)
        if why:
            problems.append(why)
    comparison: ComparisonSummary | None = None
    if is_regular(path / "comparison.json"):
        comparison_doc, why = read_json(path / "comparison.json")
        comparison = summarise_comparison(comparison_doc)
        if why:
            problems.append(why)
    flow_runs: dict[str, tuple[str, str]] = {}
    if is_regular(path / "trail.json"):
        trail_doc, why = read_json(path / "trail.json")
        flow_runs = trail_runs(trail_doc)
        if why:
            problems.append(why)
    created = (
        as_str(manifest.get("created_at"))
        or (run.started_at if run else "")
        or (sweep.started_at if sweep else "")
    )
    kind = as_str(manifest.get("kind")) or (
        "sweep"
        if sweep
        else "comparison"
        if comparison
        else "flow"
        if is_regular(path / "trail.json")
        else "run"
    )
    ci = {k: str(v) for k, v in as_dict(manifest.get("ci")).items() if isinstance(v, str | int)}
    return BundleSummary(
        key=key,
        path=path,
        rel=rel,
        kind=kind,
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
