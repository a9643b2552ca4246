"""The overview's tables: the latest verdict per target x experiment, latencies, pagination."""

from __future__ import annotations

from dataclasses import dataclass
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


@dataclass(frozen=True)
class Heatmap:
    """The latest incident (or run entry) per target x experiment."""

    targets: list[str]
    experiments: list[str]
    cells: dict[tuple[str, str], IncidentSummary]


@dataclass(frozen=True)
class LatencyRow:
    """Latencies of the latest incident of one target for one experiment, split by fault."""

    target: str
    incident: IncidentSummary
    faulted: Latency | None
    clean: Latency | None


def heatmap(snapshot: Snapshot) -> Heatmap:
    """Latest verdict per target x experiment (computed once per index snapshot)."""
    cached = snapshot.extras.get("heatmap")
    if isinstance(cached, Heatmap):
        return cached
    cells: dict[tuple[str, str], IncidentSummary] = {}
    for incident in snapshot.incidents:  # newest first
        cells.setdefault((incident.target, incident.experiment), incident)
    result = Heatmap(
        targets=sorted({t for t, _ in cells}, key=target_key),
        experiments=sorted({e for _, e in cells}, key=experiment_key),
        cells=cells,
    )
    snapshot.extras["heatmap"] = result
    return result


def latency_table(snapshot: Snapshot) -> dict[str, list[LatencyRow]]:
    """Per experiment, per target: latency of faulted and of clean deliveries (latest incidents)."""
    grid = heatmap(snapshot)
    table: dict[str, list[LatencyRow]] = {}
    for experiment in grid.experiments:
        rows = []
        for target in grid.targets:
            incident = grid.cells.get((target, experiment))
            if incident is not None and (incident.faulted or incident.clean):
                rows.append(LatencyRow(target, incident, incident.faulted, incident.clean))
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
