"""The overview's tables: the latest verdict per target x database x experiment, latencies, pagination."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from math import ceil
from typing import Generic, TypeVar

from .index import Snapshot
from .scan import IncidentSummary, Latency

# DESIGN.md's stable experiment names, in the order a reader meets them; others follow by name.
EXPERIMENT_ORDER = (
    "lost-ack",
    "lost-ack-reset",
    "timeout-overlap",
    "concurrent-duplicates",
    "conflicting-payload",
    "replay",
    "crash-after-commit",
    "crash-mid-transaction",
    "db-latency",
    "db-reset",
    "db-blackhole",
)
PAGE_SIZE = 25
T = TypeVar("T")


def experiment_key(name: str) -> tuple[int, str]:
    return (EXPERIMENT_ORDER.index(name) if name in EXPERIMENT_ORDER else len(EXPERIMENT_ORDER), name)


def target_key(name: str) -> tuple[int, str]:
    return (0 if "unsafe" in name else 1, name)


ROW_SEPARATOR = " \u00b7 "  # between a target's name and its database in a row's label


@dataclass(frozen=True)
class HeatRow:
    """A heatmap row: a target on one database.

    The label names the database only when the evidence holds runs of the target on more
    than one ("fixture:live · postgresql"), so a single-database lab reads as before.
    """

    target: str
    database: str | None
    label: str

    @property
    def lines(self) -> list[str]:
        """The label as the chart draws it: the target, then the database on a line of its own."""
        return self.label.split(ROW_SEPARATOR, 1)


@dataclass(frozen=True)
class Heatmap:
    """The latest incident (or run entry) per target x database x experiment."""

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


def heatmap(snapshot: Snapshot) -> Heatmap:
    """Latest verdict per target x database x experiment (computed once per index snapshot)."""
    cached = snapshot.extras.get("heatmap")
    if isinstance(cached, Heatmap):
        return cached
    newest: dict[tuple[str, str | None, str], IncidentSummary] = {}
    for incident in snapshot.incidents:  # newest first
        newest.setdefault((incident.target, incident.database, incident.experiment), incident)
    rows = heat_rows({(t, d) for t, d, _ in newest})
    result = Heatmap(
        rows=sorted(rows.values(), key=lambda r: (target_key(r.target), r.database or "")),
        experiments=sorted({e for *_, e in newest}, key=experiment_key),
        by_row={(rows[t, d], e): incident for (t, d, e), incident in newest.items()},
    )
    snapshot.extras["heatmap"] = result
    return result


def latency_table(snapshot: Snapshot) -> dict[str, list[LatencyRow]]:
    """Per experiment, per heatmap row: latency of faulted and of clean deliveries (latest incidents)."""
    grid = heatmap(snapshot)
    table: dict[str, list[LatencyRow]] = {}
    for experiment in grid.experiments:
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
