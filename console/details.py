"""The detail views: an incident's timeline, the two-target comparison, the repair trail."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from evidence.validate import problems, schema_kinds

from .compare import Pair, build, counterparts, pair_table, rendered_pairs, resolve_ref
from .index import VERIFIED, Integrity
from .overview import paginate
from .scan import as_dict, as_list, as_str
from .svg import delivery_latency_svg, durations_svg
from .timeline import trial_views
from .views import Context

TRAIL_FIELDS = {
    "schema", "flow", "run_id", "started_at", "ended_at", "target", "spec_sha256", "scope",
    "expected_head_sha", "merge_request", "checkpoints", "proposals", "outcome",
    "outcome_detail", "exit_code",
}  # fmt: skip


def schema_problems(kind: str, doc: Any, integrity: Integrity, limit: int = 20) -> list[str]:
    """The first schema problems of a document, so a hand-edited bundle shows what is off.

    A verified bundle is skipped: BundleWriter validates every document before writing it,
    and the manifest proves nothing changed since.
    """
    if doc is None or kind not in schema_kinds() or integrity.status == VERIFIED:
        return []
    return problems(kind, doc)[:limit]


def _pairs_for(ctx: Context, pairs: list[Pair]) -> list[Pair]:
    # The snapshot only pre-renders the pairs of the comparison index.
    if ctx.links.static_mode:
        rendered = rendered_pairs(ctx.snapshot)
        return [p for p in pairs if p in rendered]
    return pairs


def incident(ctx: Context, key: str, incident_id: str) -> str | None:
    """An incident: verdict, boundary, violations, and every trial's delivery timeline."""
    summary = ctx.snapshot.incident(key, incident_id)
    found = ctx.snapshot.by_key.get(key)
    if summary is None or found is None or summary.path is None:
        return None
    doc, problem = ctx.index.document(found, summary.path)
    integrity = ctx.integrity(found)
    d = as_dict(doc)
    trials = trial_views(d)
    return ctx.page(
        "incident.html",
        title=f"Incident {incident_id}",
        nav="overview",
        bundle=found,
        integrity=integrity,
        summary=summary,
        doc=d,
        target=as_dict(d.get("target")),
        experiment=as_dict(d.get("experiment")),
        figures=as_dict(d.get("summary")),
        violations=[as_dict(v) for v in as_list(d.get("violations"))],
        trials=trials,
        chart=delivery_latency_svg(trials),
        pairs=_pairs_for(ctx, counterparts(ctx.snapshot, summary)),
        problem=problem,
        schema_problems=schema_problems("incident", doc, integrity),
    )


def compare_index(ctx: Context, page: int = 1) -> str:
    """Every (experiment, seed) that more than one target ran, as comparable pairs (newest first, paginated)."""
    pairs = paginate(pair_table(ctx.snapshot), page)
    return ctx.page("compare_index.html", title="Compare targets", nav="compare", pairs=pairs)


def compare(
    ctx: Context, left_ref: str | None, right_ref: str | None, event: str | None, step: int | None
) -> str | None:
    """Two incidents side by side for one event, the current step highlighted."""
    left = resolve_ref(ctx.snapshot, left_ref)
    right = resolve_ref(ctx.snapshot, right_ref)
    if left is None or right is None or left.path is None or right.path is None:
        return None
    pair = Pair(left.experiment, left.seed, left, right)
    left_doc = ctx.index.document(ctx.snapshot.by_key[left.bundle], left.path)
    right_doc = ctx.index.document(ctx.snapshot.by_key[right.bundle], right.path)
    comparison = build(pair, left_doc, right_doc, event=event, step=step)
    mismatch = (left.experiment, left.seed) != (right.experiment, right.seed)
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


def before_after(checkpoints: list[dict[str, Any]]) -> list[tuple[str, str, Any, Any]]:
    """(checkpoint, key, before, after) from every output that records both a before and an after."""
    rows = []
    for cp in checkpoints:
        outputs = as_dict(cp.get("outputs"))
        pairs = [
            (k, as_dict(v))
            for k, v in outputs.items()
            if isinstance(v, dict) and {"before", "after"} <= set(v)
        ]
        if {"before", "after"} <= set(outputs):
            pairs.append(("", outputs))
        for name, holder in pairs:
            before, after = holder.get("before"), holder.get("after")
            if isinstance(before, dict) and isinstance(after, dict):
                for key in sorted(set(before) | set(after), key=str):
                    rows.append(
                        (
                            as_str(cp.get("name"), "?"),
                            f"{name}.{key}".strip("."),
                            before.get(key),
                            after.get(key),
                        )
                    )
            else:
                rows.append((as_str(cp.get("name"), "?"), name or "value", before, after))
    return rows


def trail(ctx: Context, key: str) -> str | None:
    """The repair trail: checkpoints with decisions, proposals with their diffs, verification, timings."""
    found = ctx.snapshot.by_key.get(key)
    if found is None or not found.has_trail:
        return None
    doc, problem = ctx.index.document(found, "trail.json")
    integrity = ctx.integrity(found)
    d = as_dict(doc)
    checkpoints = [as_dict(c) for c in as_list(d.get("checkpoints"))]
    proposals = [as_dict(p) for p in as_list(d.get("proposals"))]
    timings = [
        (as_str(c.get("name"), "?"), c.get("duration_ms"), as_str(c.get("status"), "?"))
        for c in checkpoints
        if isinstance(c.get("duration_ms"), int | float)
    ]
    return ctx.page(
        "trail.html",
        title=f"Repair trail · {found.rel}",
        nav="overview",
        bundle=found,
        integrity=integrity,
        trail=d,
        checkpoints=checkpoints,
        proposals=[(p, diff_lines(as_str(p.get("diff")))) for p in proposals],
        verification=[c for c in checkpoints if c.get("name") in ("verify", "strike-again")],
        before_after=before_after(checkpoints),
        timings=durations_svg(timings),
        extra={k: v for k, v in d.items() if k not in TRAIL_FIELDS},
        problem=problem,
        schema_problems=schema_problems("trail", doc, integrity),
    )
