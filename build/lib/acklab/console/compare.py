"""Comparison of two targets under the same experiment and seed, one delivery step at a time.

The same seed gives the same frozen plan, so delivery k of an event reached both handlers
under the same fault: placing them side by side shows exactly where an unsafe handler's
second fulfillment appears and the live handler's does not.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from itertools import combinations
from typing import Any

from .index import Snapshot
from .scan import IncidentSummary
from .timeline import Row, event_rows, events_of


@dataclass(frozen=True)
class Pair:
    """Two incidents of one experiment and seed against different targets."""

    experiment: str
    seed: int | None
    left: IncidentSummary
    right: IncidentSummary

    @property
    def slug(self) -> str:
        """A file-name-safe, stable name for the static snapshot's pages of this pair."""
        ident = f"{self.left.bundle}:{self.left.incident_id}|{self.right.bundle}:{self.right.incident_id}"
        digest = hashlib.sha256(ident.encode()).hexdigest()[:10]
        readable = "".join(c if c.isalnum() or c in "-_" else "-" for c in self.experiment)[:40]
        return f"{readable}-s{self.seed}-{digest}"

    @property
    def left_ref(self) -> str:
        return f"{self.left.bundle}:{self.left.incident_id}"

    @property
    def right_ref(self) -> str:
        return f"{self.right.bundle}:{self.right.incident_id}"


@dataclass(frozen=True)
class Step:
    """Delivery `index` (1-based) of the selected event on each side; None where one side has fewer."""

    index: int
    left: Row | None
    right: Row | None

    @property
    def diverges(self) -> bool:
        """The two handlers answered or counted differently at this step."""
        if self.left is None or self.right is None:
            return True
        return (self.left.status, self.left.effects_after) != (self.right.status, self.right.effects_after)


@dataclass(frozen=True)
class Comparison:
    """Everything the comparison page shows for one pair, one event and one step."""

    pair: Pair
    events: list[str]
    event: str
    event_index: int
    steps: list[Step]
    step: int
    left_doc_problem: str | None
    right_doc_problem: str | None


def _side_order(target: str) -> tuple[int, str]:
    # The unsafe reference goes on the left so that "before" reads before "after".
    return (0 if "unsafe" in target else 1, target)


def latest_by_target(snapshot: Snapshot) -> dict[tuple[str, int | None], dict[str, IncidentSummary]]:
    """(experiment, seed) -> target -> its newest incident; computed once per snapshot."""
    cached = snapshot.extras.get("latest_by_target")
    if isinstance(cached, dict):
        return cached
    latest: dict[tuple[str, int | None], dict[str, IncidentSummary]] = {}
    for incident in snapshot.incidents:  # newest first: the first seen per target wins
        if incident.path is not None:
            latest.setdefault((incident.experiment, incident.seed), {}).setdefault(incident.target, incident)
    snapshot.extras["latest_by_target"] = latest
    return latest


def pair_table(snapshot: Snapshot) -> list[Pair]:
    """The latest incident of each target per (experiment, seed), paired across targets, newest first."""
    cached = snapshot.extras.get("pairs")
    if cached is not None:
        return list(cached)
    pairs = []
    for (experiment, seed), by_target in latest_by_target(snapshot).items():
        for a, b in combinations(sorted(by_target, key=_side_order), 2):
            pairs.append(Pair(experiment, seed, by_target[a], by_target[b]))
    pairs.sort(
        key=lambda p: (-max(p.left.sort_time, p.right.sort_time), p.experiment, p.left.target, p.right.target)
    )
    snapshot.extras["pairs"] = pairs
    return list(pairs)


def rendered_pairs(snapshot: Snapshot) -> frozenset[Pair]:
    """pair_table as a set (the static snapshot links only to the pairs it pre-renders)."""
    cached = snapshot.extras.get("pair_set")
    if not isinstance(cached, frozenset):
        cached = snapshot.extras["pair_set"] = frozenset(pair_table(snapshot))
    return cached


def counterparts(snapshot: Snapshot, incident: IncidentSummary) -> list[Pair]:
    """Pairs of `incident` with the latest incident of every other target (same experiment and seed)."""
    others = latest_by_target(snapshot).get((incident.experiment, incident.seed), {})
    pairs = []
    for target in sorted(others, key=_side_order):
        if target == incident.target:
            continue
        first, second = sorted((incident, others[target]), key=lambda i: _side_order(i.target))
        pairs.append(Pair(incident.experiment, incident.seed, first, second))
    return pairs


def resolve_ref(snapshot: Snapshot, ref: str | None) -> IncidentSummary | None:
    """An incident from a `bundle:incident_id` reference, None when it names nothing known."""
    if not ref or ":" not in ref:
        return None
    key, _, incident_id = ref.partition(":")
    return snapshot.incident(key, incident_id)


def build(
    pair: Pair,
    left: tuple[Any, str | None],
    right: tuple[Any, str | None],
    *,
    event: str | None,
    step: int | None,
) -> Comparison:
    """The comparison of a pair for one event (default: the first) and step (clamped to the range)."""
    left_doc = left[0] if isinstance(left[0], dict) else {}
    right_doc = right[0] if isinstance(right[0], dict) else {}
    events = events_of(left_doc)
    events += [e for e in events_of(right_doc) if e not in events]
    chosen = event if event in events else (events[0] if events else "")
    left_rows = event_rows(left_doc, chosen)
    right_rows = event_rows(right_doc, chosen)
    count = max(len(left_rows), len(right_rows))
    steps = [
        Step(
            n + 1,
            left_rows[n] if n < len(left_rows) else None,
            right_rows[n] if n < len(right_rows) else None,
        )
        for n in range(count)
    ]
    current = min(max(step or 1, 1), max(count, 1))
    return Comparison(
        pair=pair,
        events=events,
        event=chosen,
        event_index=events.index(chosen) if chosen in events else 0,
        steps=steps,
        step=current,
        left_doc_problem=left[1],
        right_doc_problem=right[1],
    )
