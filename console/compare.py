"""Comparison of two handlers under the same experiment and seed, one delivery step at a time.

The same seed gives the same frozen plan, so delivery k of an event reached both handlers
under the same fault: placing them side by side shows exactly where an unsafe handler's
second fulfillment appears and the live handler's does not. A handler is a target and its
revision (`console.identity`), so a repair's head and its patch pair up too.

Two targets that ran an experiment but never with one seed are offered as a near pair: the
nearest incidents, their events stepped through by position, with the warning that the
deliveries do not line up one to one.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from itertools import combinations, product, zip_longest

from acklab.evidence.documents.incident import Incident

from .identity import Identity
from .index import Snapshot
from .scan import IncidentSummary
from .timeline import Row, TrialView, event_rows, events_of, trial_views

NEAR_CANDIDATES = 20  # the newest incidents of each target searched for the nearest pair


@dataclass(frozen=True)
class Pair:
    """Two incidents of one experiment, of two handlers; one seed (or, for a near pair, two)."""

    experiment: str
    seed: int | None
    left: IncidentSummary
    right: IncidentSummary

    @property
    def same_plan(self) -> bool:
        """Both ran the same frozen plan: delivery k of an event met the same fault on both."""
        return self.left.seed is not None and self.left.seed == self.right.seed

    @property
    def seeds(self) -> str:
        if self.same_plan:
            return str(self.left.seed)
        return f"{_seed(self.left.seed)} vs {_seed(self.right.seed)}"

    @property
    def slug(self) -> str:
        """A file-name-safe, stable name for the static snapshot's pages of this pair."""
        ident = f"{self.left.bundle}:{self.left.incident_id}|{self.right.bundle}:{self.right.incident_id}"
        digest = hashlib.sha256(ident.encode()).hexdigest()[:10]
        readable = "".join(c if c.isalnum() or c in "-_" else "-" for c in self.experiment)[:40]
        seeds = self.seeds.replace(" vs ", "-")
        return f"{readable}-s{seeds}-{digest}"

    @property
    def left_ref(self) -> str:
        return f"{self.left.bundle}:{self.left.incident_id}"

    @property
    def right_ref(self) -> str:
        return f"{self.right.bundle}:{self.right.incident_id}"


def _seed(seed: int | None) -> str:
    return "—" if seed is None else str(seed)


@dataclass(frozen=True)
class EventPair:
    """The event shown on each side: one id under one plan; under two seeds, events by position."""

    left: str | None
    right: str | None

    @property
    def key(self) -> str:
        """What a URL names it by: the left side's id (the right's where the left has none)."""
        return self.left or self.right or ""

    @property
    def label(self) -> str:
        if self.left == self.right or not (self.left and self.right):
            return self.key
        return f"{self.left} \u2194 {self.right}"


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
        left, right = self.left, self.right
        return (left.status, left.effects_after, left.state_after) != (
            right.status,
            right.effects_after,
            right.state_after,
        )


@dataclass(frozen=True)
class Comparison:
    """Everything the comparison page shows for one pair, one event and one step."""

    pair: Pair
    events: list[EventPair]
    event: EventPair
    event_index: int
    steps: list[Step]
    step: int
    left_doc_problem: str | None
    right_doc_problem: str | None


def identity(incident: IncidentSummary) -> Identity:
    """The handler an incident is about: its target and its revision."""
    return Identity(incident.target, incident.revision)


def _side_order(incident: IncidentSummary) -> tuple[int, str, float]:
    # The unsafe reference goes on the left so that "before" reads before "after"; two
    # revisions of one target read in the order they ran (a repair's head, then its patch).
    return (0 if "unsafe" in incident.target else 1, incident.target, incident.sort_time)


def latest_by_identity(
    snapshot: Snapshot,
) -> dict[tuple[str, int | None], dict[Identity, IncidentSummary]]:
    """(experiment, seed) -> handler -> its newest incident; computed once per snapshot."""
    cached = snapshot.extras.get("latest_by_identity")
    if isinstance(cached, dict):
        return cached
    latest: dict[tuple[str, int | None], dict[Identity, IncidentSummary]] = {}
    for incident in snapshot.incidents:  # newest first: the first seen per handler wins
        if incident.path is not None:
            latest.setdefault((incident.experiment, incident.seed), {}).setdefault(
                identity(incident), incident
            )
    snapshot.extras["latest_by_identity"] = latest
    return latest


def _newest_first(pairs: list[Pair]) -> list[Pair]:
    return sorted(
        pairs,
        key=lambda p: (
            -max(p.left.sort_time, p.right.sort_time),
            p.experiment,
            p.left.target,
            p.right.target,
        ),
    )


def pair_table(snapshot: Snapshot) -> list[Pair]:
    """The latest incident of each handler per (experiment, seed), paired across handlers, newest first."""
    cached = snapshot.extras.get("pairs")
    if cached is not None:
        return list(cached)
    pairs = []
    for (experiment, seed), by_identity in latest_by_identity(snapshot).items():
        if seed is None:
            continue  # no recorded seed: nothing says the plans were the same
        ordered = sorted(by_identity.values(), key=_side_order)
        pairs += [Pair(experiment, seed, a, b) for a, b in combinations(ordered, 2)]
    snapshot.extras["pairs"] = pairs = _newest_first(pairs)
    return list(pairs)


def near_pairs(snapshot: Snapshot) -> list[Pair]:
    """For two targets that ran an experiment but never under one seed: their nearest incidents.

    Their deliveries do not line up one to one (each seed gives its own plan), so the page
    says so and steps through the events by position; it is still the closest thing to a
    comparison the evidence holds. Nearest: the two incidents closest in time.
    """
    cached = snapshot.extras.get("near_pairs")
    if cached is not None:
        return list(cached)
    by_experiment: dict[str, dict[str, list[IncidentSummary]]] = {}
    seeds: dict[tuple[str, str], set[int]] = {}
    for incident in snapshot.incidents:  # newest first
        if incident.path is None:
            continue
        if incident.seed is not None:
            seeds.setdefault((incident.experiment, incident.target), set()).add(incident.seed)
        found = by_experiment.setdefault(incident.experiment, {}).setdefault(incident.target, [])
        if len(found) < NEAR_CANDIDATES:
            found.append(incident)
    pairs = []
    for experiment, by_target in by_experiment.items():
        for a, b in combinations(sorted(by_target), 2):
            if seeds.get((experiment, a), set()) & seeds.get((experiment, b), set()):
                continue  # they share a plan somewhere: pair_table has them
            nearest = min(
                product(by_target[a], by_target[b]), key=lambda ab: abs(ab[0].sort_time - ab[1].sort_time)
            )
            left, right = sorted(nearest, key=_side_order)
            pairs.append(Pair(experiment, None, left, right))
    snapshot.extras["near_pairs"] = pairs = _newest_first(pairs)
    return list(pairs)


def rendered_pairs(snapshot: Snapshot) -> frozenset[Pair]:
    """Every pair the static snapshot pre-renders (it links only to those)."""
    cached = snapshot.extras.get("pair_set")
    if not isinstance(cached, frozenset):
        cached = snapshot.extras["pair_set"] = frozenset(pair_table(snapshot) + near_pairs(snapshot))
    return cached


def counterparts(snapshot: Snapshot, incident: IncidentSummary) -> list[Pair]:
    """Pairs of `incident` with the latest incident of every other handler (same experiment and seed)."""
    if incident.seed is None:
        return []
    others = latest_by_identity(snapshot).get((incident.experiment, incident.seed), {})
    pairs = []
    for other in sorted(others.values(), key=_side_order):
        if identity(other) == identity(incident):
            continue
        first, second = sorted((incident, other), key=_side_order)
        pairs.append(Pair(incident.experiment, incident.seed, first, second))
    return pairs


def resolve_ref(snapshot: Snapshot, ref: str | None) -> IncidentSummary | None:
    """An incident from a `bundle:incident_id` reference, None when it names nothing known."""
    if not ref or ":" not in ref:
        return None
    key, _, incident_id = ref.partition(":")
    return snapshot.incident(key, incident_id)


def event_pairs(left_doc: Incident | None, right_doc: Incident | None, *, same_plan: bool) -> list[EventPair]:
    """The events to step through: by id under one plan, by position under two seeds."""
    left, right = events_of(left_doc), events_of(right_doc)
    if same_plan:
        return [
            EventPair(e if e in left else None, e if e in right else None)
            for e in dict.fromkeys(left + right)
        ]
    return [EventPair(a, b) for a, b in zip_longest(left, right)]


def _steps(views: tuple[list[TrialView], list[TrialView]], chosen: EventPair) -> list[Step]:
    """Delivery by delivery, one event's rows on each side (None where a side has fewer)."""
    left_rows = event_rows(None, chosen.left, views[0]) if chosen.left else []
    right_rows = event_rows(None, chosen.right, views[1]) if chosen.right else []
    return [Step(n + 1, a, b) for n, (a, b) in enumerate(zip_longest(left_rows, right_rows))]


def build(
    pair: Pair,
    left: tuple[Incident | None, str | None],
    right: tuple[Incident | None, str | None],
    *,
    event: str | None,
    step: int | None,
) -> Comparison:
    """The comparison of a pair for one event and step (clamped to the range). Without an event
    it opens at the first event where the two handlers differ, and without a step at that
    event's first delivery where they differ (else the first): the page starts where it matters."""
    left_doc, right_doc = left[0], right[0]
    events = event_pairs(left_doc, right_doc, same_plan=pair.same_plan)
    views = (trial_views(left_doc), trial_views(right_doc))
    every = [_steps(views, e) for e in events]
    if event is None:
        index = next((n for n, steps in enumerate(every) if any(s.diverges for s in steps)), 0)
    else:
        index = next((n for n, e in enumerate(events) if event in (e.left, e.right)), 0)
    chosen = events[index] if events else EventPair(None, None)
    steps = every[index] if events else []
    count = len(steps)
    if step is None:
        step = next((s.index for s in steps if s.diverges), 1)
    current = min(max(step, 1), max(count, 1))
    return Comparison(
        pair=pair,
        events=events,
        event=chosen,
        event_index=index,
        steps=steps,
        step=current,
        left_doc_problem=left[1],
        right_doc_problem=right[1],
    )
