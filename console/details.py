"""The detail views: an incident's timeline, the two-target comparison, the repair trail."""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from math import ceil
from typing import Any

from acklab.evidence.documents.incident import Incident, IncidentHead
from acklab.evidence.documents.trail import TrailDocument

from . import trail as trail_model
from .compare import Pair, build, counterparts, near_pairs, pair_table, rendered_pairs, resolve_ref
from .index import VERIFIED
from .outline import Outline, OutlineError, page_trials
from .overview import Page, flow_runs, paginate
from .security import resolve_inside
from .svg import delivery_latency_svg, durations_svg
from .timeline import TrialView, trial_view
from .views import Context

DELIVERIES_PER_PAGE = 200  # an incident may hold hundreds of thousands
SCHEMA_CHECK_BYTES = 8 << 20  # larger incidents are not validated whole in a page view

PROBLEM_LIMIT = 20


def _pairs_for(ctx: Context, pairs: list[Pair]) -> list[Pair]:
    # The snapshot only pre-renders the pairs of the comparison index.
    if ctx.links.static_mode:
        rendered = rendered_pairs(ctx.snapshot)
        return [p for p in pairs if p in rendered]
    return pairs


def incident_pages(outlined: Outline | None) -> int:
    """How many pages the incident's deliveries take (at least one)."""
    return max(1, ceil((outlined.deliveries if outlined else 0) / DELIVERIES_PER_PAGE))


def _page_of_trials(path: Any, outlined: Outline, number: int) -> list[TrialView]:
    first = (number - 1) * DELIVERIES_PER_PAGE
    last = first + DELIVERIES_PER_PAGE
    views = []
    for position, span, trial in page_trials(path, outlined.trials, first, last):
        view = trial_view(trial, position)
        low = max(0, first - span.first)
        high = max(low, min(len(view.rows), last - span.first))
        views.append(replace(view, rows=view.rows[low:high], row_offset=low, row_count=len(view.rows)))
    return views


def incident(ctx: Context, key: str, incident_id: str, page: int = 1) -> str | None:
    """An incident: verdict, boundary, violations, and its deliveries' timeline, a page at a time.

    The incident is read as an outline (`console.outline`): a page parses only the trials
    holding its deliveries, so the first page of a 200 MB incident costs what a small one does.
    """
    summary = ctx.snapshot.incident(key, incident_id)
    found = ctx.snapshot.by_key.get(key)
    if summary is None or found is None or summary.path is None:
        return None
    integrity = ctx.integrity(found)
    path = found.path / summary.path
    problem: str | None = None
    outlined: Outline | None = None
    trials: list[TrialView] = []
    pages = 1
    try:
        outlined = ctx.index.outline(path)
        pages = incident_pages(outlined)
        page = min(max(page, 1), pages)
        trials = _page_of_trials(path, outlined, page)
    except OutlineError as exc:
        problem = f"{summary.path}: unreadable ({exc})"
    head, checked = IncidentHead.read_or_problems(outlined.head) if outlined is not None else (None, [])
    if outlined is not None and head is not None and integrity.status != VERIFIED:
        # The head is read whole; a small hand-edited incident is checked whole too (its trials).
        if outlined.size <= SCHEMA_CHECK_BYTES:
            _, problem_whole = ctx.index.model(found, summary.path, Incident)
            checked = [problem_whole] if problem_whole else []
        else:
            checked = [
                "(its trials are not checked here: the incident is too large; `acklab evidence verify` "
                "checks the bundle)"
            ]
    total = outlined.deliveries if outlined is not None else 0
    listed: Page[Any] = Page([], min(max(page, 1), pages), pages, total)
    return ctx.page(
        "incident.html",
        title=f"Incident {incident_id}",
        nav="overview",
        bundle=found,
        integrity=integrity,
        summary=summary,
        head=head,
        violations=head.violations[:500] if head is not None else [],
        violation_count=len(head.violations) if head is not None else 0,
        trials=trials,
        listed=listed,
        pager_href=lambda n: ctx.links.incident(key, incident_id, n),
        first_shown=(listed.number - 1) * DELIVERIES_PER_PAGE + 1,
        last_shown=min(total, listed.number * DELIVERIES_PER_PAGE),
        chart=delivery_latency_svg(trials),
        pairs=_pairs_for(ctx, counterparts(ctx.snapshot, summary)),
        problem=problem,
        schema_problems=checked[:PROBLEM_LIMIT],
    )


def compare_index(ctx: Context, page: int = 1) -> str:
    """Every (experiment, seed) that more than one handler ran, as comparable pairs (newest first,
    paginated); and, for targets that shared an experiment but never a seed, their nearest pair."""
    pairs = paginate(pair_table(ctx.snapshot), page)
    near = near_pairs(ctx.snapshot) if pairs.number == 1 else []
    return ctx.page(
        "compare_index.html",
        title="Compare targets",
        nav="compare",
        pairs=pairs,
        near=near,
        flows=flow_runs(ctx.snapshot),
    )


def compare(
    ctx: Context, left_ref: str | None, right_ref: str | None, event: str | None, step: int | None
) -> str | None:
    """Two incidents side by side for one event, the current step highlighted."""
    left = resolve_ref(ctx.snapshot, left_ref)
    right = resolve_ref(ctx.snapshot, right_ref)
    if left is None or right is None or left.path is None or right.path is None:
        return None
    pair = Pair(left.experiment, left.seed if left.seed == right.seed else None, left, right)
    left_doc = ctx.index.model(ctx.snapshot.by_key[left.bundle], left.path, Incident)
    right_doc = ctx.index.model(ctx.snapshot.by_key[right.bundle], right.path, Incident)
    comparison = build(pair, left_doc, right_doc, event=event, step=step)
    mismatch = left.experiment != right.experiment
    warnings = []
    for bundle_key in sorted({left.bundle, right.bundle}):
        found = ctx.snapshot.by_key[bundle_key]
        integrity = ctx.integrity(found)
        if integrity.status != VERIFIED:
            warnings.append((found, integrity))
    return ctx.page(
        "compare.html",
        title=f"Compare · {left.experiment}",
        nav="compare",
        c=comparison,
        pair=pair,
        mismatch=mismatch,
        warnings=warnings,
        flows=flow_runs(ctx.snapshot),
    )


@dataclass(frozen=True)
class DiffLine:
    """A line of a unified diff with its role (add, del, hunk, meta, ctx)."""

    role: str
    text: str


def diff_lines(diff: str) -> list[DiffLine]:
    """A unified diff split into lines with their roles, for colouring."""
    out = []
    for line in diff.splitlines():
        if line.startswith(("+++", "---")):
            role = "meta"
        elif line.startswith("@@"):
            role = "hunk"
        elif line.startswith("+"):
            role = "add"
        elif line.startswith("-"):
            role = "del"
        else:
            role = "ctx"
        out.append(DiffLine(role, line))
    return out


def _incident_href(ctx: Context, path: str) -> str | None:
    """A link to the incident an output names as `<bundle>/incidents/<file>` (relative to the evidence dir)."""
    bundle_rel, sep, name = path.partition("/incidents/")
    by_rel = ctx.snapshot.extras.get("by_rel")
    if not isinstance(by_rel, dict):
        by_rel = ctx.snapshot.extras["by_rel"] = {b.rel: b for b in ctx.snapshot.bundles}
    found = by_rel.get(bundle_rel) if sep else None
    if found is None:
        return None
    incident = next((i for i in found.incidents if i.path == f"incidents/{name}" and i.incident_id), None)
    return ctx.links.incident(found.key, incident.incident_id) if incident and incident.incident_id else None


def trail(ctx: Context, key: str) -> str | None:
    """The repair trail: checkpoints with decisions, proposals with their diffs, verification, timings."""
    found = ctx.snapshot.by_key.get(key)
    if found is None or not found.has_trail:
        return None
    doc, problem = ctx.index.document(found, "trail.json")
    typed, wrong = TrailDocument.read_or_problems(doc) if problem is None else (None, [])
    integrity = ctx.integrity(found)
    incident_href = functools.partial(_incident_href, ctx)

    def log_href(rel: str) -> str | None:
        return ctx.links.raw(found.key, rel) if resolve_inside(found.path, rel) else None

    checkpoints = typed.checkpoints if typed is not None else []
    timings = [(c.name, c.duration_ms, c.status) for c in checkpoints if c.duration_ms is not None]
    return ctx.page(
        "trail.html",
        title=f"Repair trail · {found.rel}",
        nav="overview",
        bundle=found,
        integrity=integrity,
        trail=typed,
        checkpoints=checkpoints,
        proposals=[(p, diff_lines(p.diff)) for p in typed.proposals] if typed is not None else [],
        runs=[
            (c.name, found_runs)
            for c in checkpoints
            if (found_runs := trail_model.experiments(c.outputs, incident_href))
        ],
        checks=[(c.name, cs) for c in checkpoints if (cs := trail_model.checks(c.outputs, log_href))],
        changes=trail_model.changes(checkpoints, incident_href),
        timings=durations_svg(timings),
        problem=problem,
        schema_problems=wrong[:PROBLEM_LIMIT],
    )
