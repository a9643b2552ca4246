"""The listing views: overview, bundle, pipeline evidence. Shared by the live console and Pages.

A view takes the index, a snapshot of it, a Links object (live routes or relative files)
and the Site banner, and returns HTML; None means "no such bundle" (404 live, absent file
in the snapshot).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from acklab.evidence.documents.sweep import SweepDocument

from . import sweep as sweep_model
from .coerce import as_dict
from .compare import Pair, counterparts, pair_table, rendered_pairs
from .history import history
from .history import summary as history_summary
from .identity import short_revision
from .index import FAILED, EvidenceIndex, Integrity, Snapshot
from .links import Links
from .overview import flow_runs, latency_table, overview_grids, paginate
from .render import Site, render
from .reports import Report, read_reports
from .scan import BundleSummary, IncidentSummary, is_regular
from .svg import heatmap_svg, latency_svg

INCIDENTS_PER_PAGE = 50  # a merged bundle may hold thousands


@dataclass(frozen=True)
class Context:
    """What every view needs: the index, one snapshot of it, where links go, and the banner."""

    index: EvidenceIndex
    snapshot: Snapshot
    links: Links
    site: Site

    def page(self, template: str, **values: Any) -> str:
        return render(template, links=self.links, site=self.site, **values)

    def integrity(self, bundle: BundleSummary) -> Integrity:
        return self.index.integrity(bundle)

    def incident_href(self, incident: IncidentSummary) -> str:
        if incident.incident_id and incident.path:
            return self.links.incident(incident.bundle, incident.incident_id)
        return self.links.bundle(incident.bundle)


def bundle_revision(bundle: BundleSummary) -> str:
    """The short revision of the handler a bundle's incidents are about ("several", "—")."""
    revisions = {i.revision for i in bundle.incidents}
    if len(revisions) > 1:
        return "several revisions"
    return short_revision(revisions.pop()) if revisions else "—"


def overview(ctx: Context, page: int = 1) -> str:
    """Heatmap of the latest verdicts, latency under fault, and the newest bundles (paginated)."""
    grids = overview_grids(ctx.snapshot)
    grid = grids.main
    every = [grid, grids.older, *(g for _, g in grids.trails)]
    shown = {i.bundle for g in every for i in g.by_row.values()}
    warned = {
        key
        for key in shown
        if key in ctx.snapshot.by_key and ctx.integrity(ctx.snapshot.by_key[key]).status == FAILED
    }
    latency = [
        (experiment, latency_svg(experiment, rows))
        for experiment, rows in latency_table(ctx.snapshot).items()
    ]
    runs = paginate(ctx.snapshot.bundles, page)
    rows = [(b, ctx.integrity(b)) for b in runs.items]
    counts = {
        "bundles": len(ctx.snapshot.bundles),
        "incidents": sum(1 for i in ctx.snapshot.incidents if i.path),
        "failing": sum(1 for c in grid.by_row.values() if c.verdict == "fail"),
    }
    flows = flow_runs(ctx.snapshot)
    return ctx.page(
        "overview.html",
        title="Overview",
        nav="overview",
        heatmap=heatmap_svg(grid, ctx.incident_href, warned) if grid.by_row else None,
        older=heatmap_svg(grids.older, ctx.incident_href, warned, label="Verdicts of other revisions")
        if grids.older.by_row
        else None,
        older_rows=len(grids.older.rows),
        trails=[
            (
                trail,
                heatmap_svg(g, ctx.incident_href, warned, label=f"Runs of the repair trail {trail.rel}"),
            )
            for trail, g in grids.trails
        ],
        flows=flows,
        revision=bundle_revision,
        warned=sorted(warned),
        latency=latency,
        runs=runs,
        rows=rows,
        counts=counts,
    )


def bundle(ctx: Context, key: str, page: int = 1) -> str | None:
    """One bundle: its run, its experiments with their incidents (paginated), and links to the rest."""
    found = ctx.snapshot.by_key.get(key)
    if found is None:
        return None
    if found.kind == "sweep":
        return sweep(ctx, found)
    listed = paginate(
        sorted(found.incidents, key=lambda i: (i.target, i.experiment)), page, INCIDENTS_PER_PAGE
    )
    incidents = listed.items
    static_pairs = rendered_pairs(ctx.snapshot) if ctx.links.static_mode else None
    compare = {}
    for incident in incidents:
        if incident.path:
            pairs = counterparts(ctx.snapshot, incident)
            if static_pairs is not None:
                pairs = [p for p in pairs if p in static_pairs]
            compare[incident.incident_id] = pairs
    raw = [
        rel
        for rel in ("run.json", "trail.json", "comparison.json", "manifest.json")
        if is_regular(found.path / rel)
    ]
    return ctx.page(
        "bundle.html",
        title=f"Bundle {found.rel}",
        nav="overview",
        bundle=found,
        integrity=ctx.integrity(found),
        incidents=incidents,
        listed=listed,
        pager_href=lambda n: ctx.links.bundle(found.key, n),
        compare=compare,
        raw=raw,
        parent=enclosing_sweep(ctx.snapshot, found),
        compared=compared_runs(ctx, found),
    )


def enclosing_sweep(snapshot: Snapshot, found: BundleSummary) -> BundleSummary | None:
    """The sweep or comparison a run bundle belongs to (each nests its runs in its own directory)."""
    sweeps = snapshot.extras.get("sweeps")
    if not isinstance(sweeps, list):  # once per snapshot: the export asks for every bundle
        sweeps = snapshot.extras["sweeps"] = [
            b for b in snapshot.bundles if b.kind in ("sweep", "comparison")
        ]
    return next((b for b in sweeps if b.path != found.path and found.path.is_relative_to(b.path)), None)


@dataclass(frozen=True)
class ComparedRuns:
    """A comparison bundle's runs (target, run id, its nested bundle) and the pairs they make."""

    runs: list[tuple[str, str, BundleSummary | None]]
    pairs: list[Pair]


def compared_runs(ctx: Context, found: BundleSummary) -> ComparedRuns | None:
    """What a comparison bundle holds: one run per target, all from one plan."""
    if found.comparison is None:
        return None
    by_path = {b.path: b for b in ctx.snapshot.bundles}
    runs = [
        (target, run_id, by_path.get(found.path / rel) if rel else None)
        for target, run_id, rel in found.comparison.runs
    ]
    keys = {b.key for _, _, b in runs if b is not None}
    pairs = [p for p in pair_table(ctx.snapshot) if {p.left.bundle, p.right.bundle} <= keys]
    return ComparedRuns(runs, pairs)


def sweep(ctx: Context, found: BundleSummary) -> str:
    """A sweep: its matrix as a heatmap whose cells open their incidents, and its nested runs."""
    raw_doc, problem = ctx.index.document(found, "sweep.json")
    doc, schema_problems = SweepDocument.read_or_problems(raw_doc) if problem is None else (None, [])
    nested = sweep_model.nested_bundles(ctx.snapshot, found)
    raw = [rel for rel in ("sweep.json", "heatmap.svg", "manifest.json") if is_regular(found.path / rel)]
    return ctx.page(
        "sweep.html",
        title=f"Sweep {found.rel}",
        nav="overview",
        bundle=found,
        integrity=ctx.integrity(found),
        doc=doc,
        heatmap=sweep_model.heatmap(doc, nested, ctx.links) if doc is not None else None,
        runs=sweep_model.runs(doc, nested),
        raw=raw,
        problem=problem,
        schema_problems=schema_problems[: sweep_model.PROBLEM_LIMIT],
    )


@dataclass(frozen=True)
class ManifestRow:
    """A manifest entry and what verification says about it."""

    rel: str
    size: int | None
    sha256: str
    state: str


def manifest_rows(doc: Any, integrity: Integrity) -> list[ManifestRow]:
    """Every manifest entry with its verification state, plus files the manifest does not know."""
    files = as_dict(as_dict(doc).get("files"))
    states: dict[str, str] = {}
    for line in integrity.lines:
        state, _, rel = line.partition(": ")
        if state in ("changed", "missing", "extra"):
            states[rel] = state
    rows = []
    for rel, raw in sorted(files.items()):
        entry = as_dict(raw)
        size = entry.get("size")
        rows.append(
            ManifestRow(
                str(rel),
                size if isinstance(size, int) else None,
                str(entry.get("sha256", "")),
                states.get(rel, "ok"),
            )
        )
    rows += [ManifestRow(rel, None, "", "extra") for rel, state in sorted(states.items()) if state == "extra"]
    return rows


def pipeline(ctx: Context, key: str) -> str | None:
    """Pipeline evidence of a bundle: CI metadata, report counts, downloads, verification."""
    found = ctx.snapshot.by_key.get(key)
    if found is None:
        return None
    integrity = ctx.integrity(found)
    manifest, problem = ctx.index.document(found, "manifest.json") if found.has_manifest else (None, None)
    reports = read_reports(found.path, found.reports)
    return ctx.page(
        "pipeline.html",
        title=f"Pipeline evidence · {found.rel}",
        nav="pipelines",
        bundle=found,
        integrity=integrity,
        reports=reports,
        manifest_rows=manifest_rows(manifest, integrity) if manifest is not None else [],
        manifest_problem=problem,
    )


@dataclass(frozen=True)
class JobRow:
    """One bundle as a job of a pipeline, with its report totals."""

    bundle: BundleSummary
    integrity: Integrity
    reports: list[Report]

    @property
    def junit(self) -> tuple[int, int, int, int] | None:
        found = [r for r in self.reports if r.kind == "JUnit" and not r.problem]
        if not found:
            return None
        return (
            sum(r.tests for r in found),
            sum(r.failures for r in found),
            sum(r.errors for r in found),
            sum(r.skipped for r in found),
        )

    def findings(self, kind: str) -> int | None:
        found = [r for r in self.reports if r.kind == kind]
        return sum(r.findings for r in found) if found else None


def pipelines(ctx: Context, page: int = 1) -> str:
    """Every bundle grouped by the pipeline that produced it, newest first (paginated)."""
    runs = paginate(ctx.snapshot.bundles, page)
    groups: dict[str, list[JobRow]] = {}
    for found in runs.items:
        row = JobRow(found, ctx.integrity(found), read_reports(found.path, found.reports))
        groups.setdefault(found.ci.get("pipeline_id", ""), []).append(row)
    return ctx.page("pipelines.html", title="Pipelines", nav="pipelines", runs=runs, groups=groups)


def history_view(ctx: Context) -> str:
    """Verdict per pipeline for each target x experiment: flips, first failure, flaky rows."""
    found = history(ctx.snapshot)
    return ctx.page(
        "history.html",
        title="History",
        nav="history",
        history=found,
        counts=history_summary(found),
        href=ctx.incident_href,
    )
