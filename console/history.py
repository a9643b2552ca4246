"""History across pipelines: the verdict of each target x experiment, pipeline by pipeline.

The evidence directory may hold the bundles of several pipelines (the Pages job pulls the
default branch's last N with ``acklab evidence pull --last N``; any directory of pulled
bundles works offline). A bundle belongs to the pipeline its manifest names
(``ci.pipeline_id``); a repair flow's runs are left out (they are about a patch, not the
branch). Per pipeline, a cell combines every incident of that target and experiment (the
shards, the merged bundle): fail if any failed, else error if any erred, else pass. Per row
it tells the first pipeline where it failed, since when it has been failing, and whether it
is flaky: both verdicts within the window.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from acklab.evidence.documents.verdicts import rank

from .index import Snapshot
from .overview import experiment_key, flow_runs, target_key
from .scan import IncidentSummary

MAX_PIPELINES = 50  # the newest; older ones are counted, not drawn
PASS, FAIL, ERROR = "pass", "fail", "error"


@dataclass(frozen=True)
class PipelineColumn:
    """One pipeline of the window: its id, when its newest bundle was made, its commit."""

    pipeline_id: str
    created_at: str
    commit: str | None


@dataclass(frozen=True)
class HistoryCell:
    """A target x experiment in one pipeline: the combined verdict and the incident it links to."""

    verdict: str
    incident: IncidentSummary  # the first failing one, else the newest
    count: int  # incidents combined (shards, merged bundle, reruns)
    revisions: tuple[str | None, ...]
    flipped: bool = False  # the verdict differs from the row's previous pipeline


@dataclass(frozen=True)
class HistoryRow:
    """A target x experiment across the window's pipelines."""

    target: str
    experiment: str
    cells: dict[str, HistoryCell]
    first_failed: str | None
    failing_since: str | None
    flaky: bool

    @property
    def latest(self) -> HistoryCell | None:
        return next(iter(reversed(self.cells.values())), None)


@dataclass(frozen=True)
class History:
    """The window (oldest pipeline first) and its rows."""

    pipelines: list[PipelineColumn]
    rows: list[HistoryRow]
    left_out: int  # older pipelines beyond MAX_PIPELINES


def pipeline_order(pipeline_id: str) -> tuple[int, int, str]:
    """Pipeline ids are increasing integers on one GitLab; anything else sorts after, by text."""
    return (0, int(pipeline_id), "") if pipeline_id.isdigit() else (1, 0, pipeline_id)


def combine(incidents: list[IncidentSummary]) -> tuple[str, IncidentSummary]:
    """The pipeline's verdict for one target x experiment, and the incident that shows it."""
    ranked = sorted(incidents, key=lambda i: (rank(i.verdict), -i.sort_time))
    best = ranked[0]
    return best.verdict or "unknown", best


def _row(target: str, experiment: str, cells: dict[str, HistoryCell]) -> HistoryRow:
    verdicts = [c.verdict for c in cells.values()]
    order = list(cells)
    first_failed = next((p for p in order if cells[p].verdict == FAIL), None)
    failing_since = None
    if verdicts and verdicts[-1] == FAIL:
        streak = len(verdicts) - next(
            (n for n, v in enumerate(reversed(verdicts)) if v != FAIL), len(verdicts)
        )
        failing_since = order[streak]
    return HistoryRow(
        target=target,
        experiment=experiment,
        cells=cells,
        first_failed=first_failed,
        failing_since=failing_since,
        flaky=PASS in verdicts and FAIL in verdicts,
    )


def history(snapshot: Snapshot) -> History:
    """Every target x experiment across the pipelines of the evidence (computed once per snapshot)."""
    cached = snapshot.extras.get("history")
    if isinstance(cached, History):
        return cached
    flows = flow_runs(snapshot)
    grouped: dict[tuple[str, str], dict[str, list[IncidentSummary]]] = {}
    columns: dict[str, PipelineColumn] = {}
    for bundle in snapshot.bundles:  # newest first: a pipeline's column shows its newest bundle
        pipeline = bundle.ci.get("pipeline_id", "")
        if not pipeline:
            continue
        for incident in bundle.incidents:
            if incident.run_id in flows:
                continue
            columns.setdefault(
                pipeline, PipelineColumn(pipeline, bundle.created_at, bundle.ci.get("commit_sha"))
            )
            by_pipeline = grouped.setdefault((incident.target, incident.experiment), {})
            by_pipeline.setdefault(pipeline, []).append(incident)
    ordered = sorted(columns, key=pipeline_order)
    window = ordered[-MAX_PIPELINES:]
    rows = []
    for (target, experiment), by_pipeline in grouped.items():
        cells: dict[str, HistoryCell] = {}
        previous: str | None = None
        for pipeline in window:
            found = by_pipeline.get(pipeline)
            if not found:
                continue
            verdict, shown = combine(found)
            revisions = tuple(dict.fromkeys(i.revision for i in found))
            flipped = previous is not None and verdict != previous
            cells[pipeline] = HistoryCell(verdict, shown, len(found), revisions, flipped)
            previous = verdict
        if cells:
            rows.append(_row(target, experiment, cells))
    rows.sort(key=lambda r: (target_key(r.target), experiment_key(r.experiment)))
    result = History([columns[p] for p in window], rows, len(ordered) - len(window))
    snapshot.extras["history"] = result
    return result


def summary(found: History) -> dict[str, Any]:
    """Counts the page's lede states: rows, flaky rows, rows failing now."""
    return {
        "pipelines": len(found.pipelines),
        "rows": len(found.rows),
        "flaky": sum(r.flaky for r in found.rows),
        "failing": sum(1 for r in found.rows if r.failing_since is not None),
    }
