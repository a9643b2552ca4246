"""The overview's tables: the latest verdict per handler x database x experiment, latencies, pagination.

A heatmap row is one handler identity (`console.identity`: the target's name and its
revision), so a verdict is never shown under code it was not about: each target's row holds
its newest revision, other revisions are listed apart, and the runs a repair flow made (its
head and its patched checkout, often under the target's own name) are grouped under their
trail and never take the target's cell.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import cached_property
from math import ceil
from typing import Any, Generic, TypeVar

from acklab.evidence.documents.latency import Latency
from acklab.evidence.documents.records import SINK_SOURCES
from acklab.evidence.documents.verdicts import EXPERIMENT_NAMES

from .identity import HEAD, PATCHED, FlowRun, short_revision
from .index import Snapshot
from .scan import BundleSummary, IncidentSummary

# Columns in the order a reader meets the experiments (the one list of names); others follow by name.
EXPERIMENT_ORDER: tuple[str, ...] = EXPERIMENT_NAMES
PAGE_SIZE = 25
T = TypeVar("T")


# Beside the experiments, a column per source of effects the lab's sinks counted (docs/sinks.md):
# the row's worst incident for that source, across its experiments.
SOURCE_COLUMNS: tuple[str, ...] = SINK_SOURCES


def experiment_key(name: str) -> tuple[int, str]:
    if name in SOURCE_COLUMNS:
        return (len(EXPERIMENT_ORDER) + 1 + SOURCE_COLUMNS.index(name), name)
    return (EXPERIMENT_ORDER.index(name) if name in EXPERIMENT_ORDER else len(EXPERIMENT_ORDER), name)


def _source_cells(
    newest: dict[tuple[HeatRow, str], IncidentSummary],
) -> dict[tuple[HeatRow, str], IncidentSummary]:
    """Per row, per source its sinks counted: the incident with the most violations of that source,
    shown as that source's verdict (fail when any experiment's emails or calls broke an invariant)."""
    cells: dict[tuple[HeatRow, str], IncidentSummary] = {}
    for (row, _), incident in newest.items():
        for source, broken in incident.sinks:
            seen = cells.get((row, source))
            if seen is None or broken > seen.violations:
                verdict = "fail" if broken else ("pass" if incident.verdict != "error" else "error")
                cells[row, source] = replace(incident, experiment=source, verdict=verdict, violations=broken)
    return cells


def target_key(name: str) -> tuple[int, str]:
    return (0 if "unsafe" in name else 1, name)


ROW_SEPARATOR = " \u00b7 "  # between a target's name and its database in a row's label
MAX_OLDER_ROWS = 12  # other revisions of the targets, newest first
MAX_TRAILS = 5  # repair trails whose runs the overview shows, newest first
ROLE_ORDER = {HEAD: 0, PATCHED: 1}


@dataclass(frozen=True)
class HeatRow:
    """A heatmap row: one handler (target + revision) on one database; in a repair trail, its role.

    The label names the database only when the evidence holds runs of the target on more
    than one ("fixture:live · postgresql"), so a single-database lab reads as before; the
    revision is always drawn, on a line of its own.
    """

    target: str
    database: str | None
    label: str
    revision: str | None = None
    role: str = ""

    @property
    def short(self) -> str:
        return short_revision(self.revision)

    @property
    def title(self) -> str:
        return f"{self.role + ': ' if self.role else ''}{self.label} @ {self.short}"

    @property
    def lines(self) -> list[str]:
        """The label as the chart draws it: the target (with its role), its revision, its database."""
        first, _, database = self.label.partition(ROW_SEPARATOR)
        head = f"{self.role}: {first}" if self.role else first
        return [head, self.short, *([database] if database else [])]


@dataclass(frozen=True)
class Heatmap:
    """The latest incident per row (a handler on a database) x experiment."""

    rows: list[HeatRow]
    experiments: list[str]
    by_row: dict[tuple[HeatRow, str], IncidentSummary]

    @cached_property
    def cells(self) -> dict[tuple[str, str], IncidentSummary]:
        """The latest incident per target x experiment, whichever database it ran on."""
        newest: dict[tuple[str, str], IncidentSummary] = {}
        for (row, experiment), incident in self.by_row.items():
            key = (row.target, experiment)
            if key not in newest or incident.sort_time > newest[key].sort_time:
                newest[key] = incident
        return newest


@dataclass(frozen=True)
class LatencyRow:
    """Latencies of the latest incident of one heatmap row for one experiment, split by fault."""

    target: str  # the row's label
    incident: IncidentSummary
    faulted: Latency | None
    clean: Latency | None


@dataclass(frozen=True)
class OverviewGrids:
    """What the overview draws: each target's newest handler, its other revisions, and the
    runs of each repair trail (which never take a target's own cell)."""

    main: Heatmap
    older: Heatmap
    trails: list[tuple[BundleSummary, Heatmap]]


def heat_rows(pairs: set[tuple[str, str | None]]) -> dict[tuple[str, str | None], HeatRow]:
    """A row per (target, database), labelled with the database where a target has several."""
    databases: dict[str, set[str | None]] = {}
    for target, database in pairs:
        databases.setdefault(target, set()).add(database)
    return {
        (target, database): HeatRow(
            target,
            database,
            target
            if len(databases[target]) == 1
            else f"{target}{ROW_SEPARATOR}{database or 'database unknown'}",
        )
        for target, database in pairs
    }


def flow_runs(snapshot: Snapshot) -> dict[str, FlowRun]:
    """run id -> the repair flow that made it, for every run a trail names (once per snapshot)."""
    cached = snapshot.extras.get("flow_runs")
    if isinstance(cached, dict):
        return cached
    found: dict[str, FlowRun] = {}
    for bundle in snapshot.bundles:  # newest first: a run named by two trails goes with the newer
        for run_id, (role, checkpoint) in bundle.flow_runs.items():
            found.setdefault(run_id, FlowRun(bundle.key, role, checkpoint))
    snapshot.extras["flow_runs"] = found
    return found


def _grid(newest: dict[tuple[HeatRow, str], IncidentSummary], order: Callable[[HeatRow], Any]) -> Heatmap:
    newest = {**newest, **_source_cells(newest)}
    return Heatmap(
        rows=sorted({row for row, _ in newest}, key=order),
        experiments=sorted({e for _, e in newest}, key=experiment_key),
        by_row=newest,
    )


def _by_target(row: HeatRow) -> tuple[Any, ...]:
    return (target_key(row.target), row.database or "")


def _main_and_older(incidents: list[IncidentSummary]) -> tuple[Heatmap, Heatmap]:
    """Each target's newest revision (per database) is its row; the other revisions go below."""
    current: dict[tuple[str, str | None], str | None] = {}
    for incident in incidents:  # newest first
        current.setdefault((incident.target, incident.database), incident.revision)
    rows = heat_rows(set(current))
    main: dict[tuple[HeatRow, str], IncidentSummary] = {}
    older: dict[tuple[HeatRow, str], IncidentSummary] = {}
    older_rows: list[HeatRow] = []
    for incident in incidents:
        base = rows[incident.target, incident.database]
        row = replace(base, revision=incident.revision)
        if incident.revision == current[incident.target, incident.database]:
            main.setdefault((row, incident.experiment), incident)
            continue
        if row not in older_rows:
            if len(older_rows) >= MAX_OLDER_ROWS:
                continue
            older_rows.append(row)
        older.setdefault((row, incident.experiment), incident)
    return _grid(main, _by_target), _grid(older, older_rows.index)


def _trail_grid(incidents: list[IncidentSummary], runs: dict[str, tuple[str, str]]) -> Heatmap:
    newest: dict[tuple[HeatRow, str], IncidentSummary] = {}
    for incident in incidents:
        role = runs[incident.run_id][0]
        label = incident.target + (f"{ROW_SEPARATOR}{incident.database}" if incident.database else "")
        row = HeatRow(incident.target, incident.database, label, incident.revision, role)
        newest.setdefault((row, incident.experiment), incident)
    return _grid(newest, lambda r: (ROLE_ORDER.get(r.role, 2), target_key(r.target), r.short))


def overview_grids(snapshot: Snapshot) -> OverviewGrids:
    """The overview's heatmaps (computed once per index snapshot)."""
    cached = snapshot.extras.get("grids")
    if isinstance(cached, OverviewGrids):
        return cached
    flows = flow_runs(snapshot)
    own = [i for i in snapshot.incidents if i.run_id not in flows]
    main, older = _main_and_older(own)
    trails: list[tuple[BundleSummary, Heatmap]] = []
    for bundle in snapshot.bundles:
        if not bundle.flow_runs or len(trails) >= MAX_TRAILS:
            continue
        ran = [i for i in snapshot.incidents if i.run_id in bundle.flow_runs]
        if ran:
            trails.append((bundle, _trail_grid(ran, bundle.flow_runs)))
    result = OverviewGrids(main, older, trails)
    snapshot.extras["grids"] = result
    return result


def heatmap(snapshot: Snapshot) -> Heatmap:
    """Latest verdict per target (its newest revision) x database x experiment; flow runs apart."""
    return overview_grids(snapshot).main


def latency_table(snapshot: Snapshot) -> dict[str, list[LatencyRow]]:
    """Per experiment, per heatmap row: latency of faulted and of clean deliveries (latest incidents)."""
    grid = heatmap(snapshot)
    table: dict[str, list[LatencyRow]] = {}
    for experiment in (e for e in grid.experiments if e not in SOURCE_COLUMNS):
        rows = []
        for row in grid.rows:
            incident = grid.by_row.get((row, experiment))
            if incident is not None and (incident.faulted or incident.clean):
                rows.append(LatencyRow(row.label, incident, incident.faulted, incident.clean))
        if rows:
            table[experiment] = rows
    return table


@dataclass(frozen=True)
class Page(Generic[T]):
    """One page of a list, 1-based."""

    items: list[T]
    number: int
    pages: int
    total: int

    @property
    def has_prev(self) -> bool:
        return self.number > 1

    @property
    def has_next(self) -> bool:
        return self.number < self.pages


def paginate(items: list[T], number: int, size: int = PAGE_SIZE) -> Page[T]:
    """Page `number` (clamped to the range) of `items`."""
    pages = max(1, ceil(len(items) / size))
    number = min(max(number, 1), pages)
    start = (number - 1) * size
    return Page(items[start : start + size], number, pages, len(items))
