"""Delivery timelines: each delivery of a trial with the effects counted before and after it.

The harness records deliveries and observations separately (an observation names the
delivery it follows with `after_seq`), so "effects before/after" is a join done here, once,
for both the incident view and the comparison. Trials are read with the trial model
(`acklab.evidence.documents.trial.Trial`); one that does not validate shows as such.

What is over the limit is what the harness recorded: a row is marked where the trial's
``at-most-once-effect`` violation of that event names the limit (``expected: "<= N"``, the
target's ``expect.max_effects``, or ``max_emails``/``max_calls`` for a violation whose source
is ``emails`` or ``calls``) and the count of that source after the delivery is beyond it. The
console never decides a violation of its own.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from typing import Any

from acklab.evidence.documents.incident import Incident
from acklab.evidence.documents.records import (
    SINK_SOURCES,
    CommitConfirmation,
    Delivery,
    Observation,
    Violation,
)
from acklab.evidence.documents.trial import Trial

from .fleet import Moment, moments_of
from .jobs import JobRow, job_rows
from .objects import ObjectView, object_views

_AT_MOST = re.compile(r"^<=\s*(\d+)$")
FACTS_SHOWN = 20


@dataclass(frozen=True)
class ProofTry:
    """One try of a trial's fault proof: whether it landed, what shows it, its measurements."""

    number: int
    landed: bool
    evidence: str
    facts: dict[str, str]
    # conflicting-payload: the fields the conflicting body changed (path, original, conflicting)
    changed: tuple[tuple[str, str, str], ...] = ()


@dataclass(frozen=True)
class Row:
    """One delivery, as a line of the timeline."""

    seq: int
    event_id: str
    attempt: int | None
    kind: str
    fault: str
    faulted: bool
    sent_at: str
    latency_ms: float | None
    status: int | None
    sender_status: int | None
    error: str | None
    excerpt: str | None
    headers: dict[str, str]
    effects_before: int | None
    effects_after: int | None
    confirmation: CommitConfirmation | None
    limit: int | None = None  # the recorded at-most-once limit of the event, where it was violated
    state_after: str | None = None  # beyond one event: the object's state read right after it
    sinks_after: str | None = None  # effects.smtp / effects.outbound: "2 emails · 1 call" read after it
    replica: int | None = None  # topology.replicas: which replica of the consumer answered it
    # Each sink source's count of the event read right after it (`SINK_SOURCES`: emails, calls...).
    counts_after: tuple[tuple[str, int], ...] = ()
    # The recorded limits of the event's sink sources, where a violation of theirs names one.
    sink_limits: tuple[tuple[str, int], ...] = ()

    @property
    def ack_differs(self) -> bool:
        """The sender saw another status than the handler answered (a lost or replaced ack)."""
        return self.status != self.sender_status

    @property
    def over_limit(self) -> bool:
        """The trial recorded an at-most-once violation of this event, and after this delivery
        the count is beyond its limit."""
        rows = self.limit is not None and self.effects_after is not None and self.effects_after > self.limit
        return rows or bool(self.sinks_over)

    def count_after(self, source: str) -> int | None:
        """The event's count of `source` (a sink's) read right after it; None: not read."""
        return dict(self.counts_after).get(source)

    @property
    def sinks_over(self) -> tuple[str, ...]:
        """The sink sources beyond their recorded limit after this delivery."""
        return tuple(s for s, limit in self.sink_limits if (self.count_after(s) or 0) > limit)

    @property
    def over_what(self) -> str:
        """What is over its limit, in words: ``more than one effect and more than one email``."""
        rows = self.limit is not None and self.effects_after is not None and self.effects_after > self.limit
        over = [("effect", self.limit)] if rows else []
        over += [(s[:-1], limit) for s, limit in self.sink_limits if s in self.sinks_over]
        return " and ".join(
            f"more than {'one' if n == 1 else n} {word}{'' if n == 1 else 's'}"
            for word, n in over
            if n is not None
        )


@dataclass(frozen=True)
class TrialView:
    """A trial with its timeline rows."""

    trial_id: str
    index: int
    verdict: str
    seed: int | None
    event_ids: list[str]
    started_at: str
    duration_ms: float | None
    error: str | None
    rows: list[Row]
    violations: list[Violation]
    confirmations: list[CommitConfirmation]
    tries: list[ProofTry] = field(default_factory=list)
    objects: list[ObjectView] = field(default_factory=list)  # beyond one event (console.objects)
    moments: list[Moment] = field(default_factory=list)  # beyond one process: restarts, clock moves
    jobs: list[JobRow] = field(default_factory=list)  # behind a queue: each job's life (console.jobs)
    # When a page shows part of the trial: its first row's position and the trial's row count.
    row_offset: int = 0
    row_count: int | None = None

    @property
    def total_rows(self) -> int:
        return self.row_count if self.row_count is not None else len(self.rows)

    @property
    def partial(self) -> bool:
        return self.row_offset > 0 or self.total_rows > len(self.rows)


def effects_around(
    observations: list[Observation], event_id: str, seq: int, previous: int | None
) -> tuple[int | None, int | None]:
    """(effects before, effects after) delivery `seq` of `event_id`.

    "Before" is only what was read right after the event's previous delivery (or before its
    first one); under concurrent deliveries the lab reads once at the end, and carrying an
    older count forward would claim a reading that was never taken.
    """
    wanted_before = -1 if previous is None else previous
    before: int | None = None
    after: int | None = None
    for obs in observations:
        if obs.event_id != event_id:
            continue
        position = -1 if obs.after_seq is None else obs.after_seq
        if position == wanted_before:
            before = obs.effects
        elif position == seq:
            after = obs.effects
    return before, after


def limits(violations: list[Violation]) -> dict[str, int]:
    """event id -> the at-most-once limit its recorded violation of the rows names."""
    found: dict[str, int] = {}
    for v in violations:
        match = _AT_MOST.match(v.expected) if v.invariant == "at-most-once-effect" else None
        if match and v.source in (None, "rows"):
            found.setdefault(v.event_id, int(match.group(1)))
    return found


def sink_limits(violations: list[Violation]) -> dict[str, tuple[tuple[str, int], ...]]:
    """event id -> (source, limit) of each at-most-once violation of a sink source of it."""
    found: dict[str, dict[str, int]] = {}
    for v in violations:
        match = _AT_MOST.match(v.expected) if v.invariant == "at-most-once-effect" else None
        if match and v.source in SINK_SOURCES:
            found.setdefault(v.event_id, {}).setdefault(v.source, int(match.group(1)))
    return {event: tuple(sorted(by.items())) for event, by in found.items()}


def _fact(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    return str(value) if isinstance(value, int | str | bool) else "…"


def _changed(facts: dict[str, Any]) -> tuple[tuple[str, str, str], ...]:
    """``conflict_fields`` of a conflicting-payload try, as (path, original, conflicting) text."""
    fields = facts.get("conflict_fields")
    if not isinstance(fields, list):
        return ()

    def text(value: Any, missing: bool) -> str:
        return "(absent)" if missing else json.dumps(value, ensure_ascii=False)[:200]

    return tuple(
        (
            str(f.get("path", "")),
            text(f.get("original"), f.get("missing") == "original"),
            text(f.get("conflicting"), f.get("missing") == "conflicting"),
        )
        for f in fields[:FACTS_SHOWN]
        if isinstance(f, dict)
    )


def tries_of(trial: Trial) -> list[ProofTry]:
    """The tries of a trial's fault proof, each with its evidence and (some of) its facts."""
    tries = trial.fault.tries if trial.fault is not None else []
    return [
        ProofTry(
            t.try_,
            t.landed,
            t.evidence,
            {
                str(k): _fact(v)
                for k, v in sorted((t.facts or {}).items())[:FACTS_SHOWN]
                if k != "conflict_fields"
            },
            _changed(t.facts or {}),
        )
        for t in tries
    ]


def bursts_landed(trial: Trial) -> dict[str, str]:
    """event id -> the label of the burst its duplicates were released in, where the trial's
    fault proof says that burst landed. A burst's fault is the release of all its deliveries
    together: no single delivery record carries it, so each would otherwise read "none"."""
    labels: dict[str, str] = {}
    for t in trial.fault.tries if trial.fault is not None else []:
        facts = t.facts or {}
        if t.landed and "burst" in facts:
            label = f"burst of {facts['burst']} released together"
            if facts.get("burst_sync"):
                label += f" ({facts['burst_sync']})"
            for event_id in t.event_ids or []:
                labels.setdefault(event_id, label)
    return labels


def _row(
    d: Delivery,
    trial: Trial,
    before: int | None,
    after: int | None,
    limit: int | None,
    *,
    burst: str | None = None,
    sinks: tuple[tuple[str, int], ...] = (),
) -> Row:
    in_burst = burst is not None and d.kind == "duplicate" and not d.faulted
    return Row(
        seq=d.seq,
        event_id=d.event_id,
        attempt=d.attempt,
        kind=d.kind,
        fault=burst if in_burst and burst else d.fault,
        faulted=in_burst or d.faulted,
        sent_at=d.sent_at,
        latency_ms=d.latency_ms,
        status=d.status,
        sender_status=d.sender_status,
        error=d.error,
        excerpt=d.response_excerpt,
        headers=dict(d.headers),
        effects_before=before,
        effects_after=after,
        confirmation=next((c for c in trial.commit_confirmations if c.seq == d.seq), None),
        limit=limit,
        sinks_after=sinks_after(trial.observations, d.event_id, d.seq),
        replica=d.replica,
        counts_after=counts_after(trial.observations, d.event_id, d.seq),
        sink_limits=sinks,
    )


def counts_after(observations: list[Observation], event_id: str, seq: int) -> tuple[tuple[str, int], ...]:
    """Each sink source's count of `event_id` in the first read right after delivery `seq`."""
    obs = next((o for o in observations if o.event_id == event_id and o.after_seq == seq), None)
    if obs is None:
        return ()
    return tuple((source, n) for source in SINK_SOURCES if (n := obs.count_of(source)) is not None)


def sinks_after(observations: list[Observation], event_id: str, seq: int) -> str | None:
    """What the sinks had received for `event_id` when the lab read it right after delivery `seq`."""
    for obs in observations:
        if obs.event_id == event_id and obs.after_seq == seq and obs.sinks_seen:
            counts = [(n, source) for source in SINK_SOURCES if (n := obs.count_of(source)) is not None]
            # "2 emails · 1 call": each sink's source, one of it named in the singular
            return " \u00b7 ".join(
                f"{n} {source if n != 1 else source.removesuffix('s')}" for n, source in counts
            )
    return None


def own_rows(trial: Trial) -> list[Observation]:
    """The trial's observations, each placed after its own event's delivery.

    A read taken after a delivery of another event — an object's siblings, a burst of several
    events read once at the end — belongs to the row of its event's last delivery at or before
    it: each event's effects on its own delivery's row, never lost between two events' rows."""
    sent: dict[str, list[int]] = {}
    for d in trial.deliveries:
        sent.setdefault(d.event_id, []).append(d.seq)
    placed = []
    for obs in trial.observations:
        own = sent.get(obs.event_id, [])
        if obs.after_seq is not None and obs.after_seq not in own:
            earlier = [s for s in own if s <= obs.after_seq]
            placed.append(obs.model_copy(update={"after_seq": max(earlier) if earlier else None}))
        else:
            placed.append(obs)
    return placed


def rows_of(trial: Trial) -> list[Row]:
    """The trial's deliveries in seq order, joined with observations and commit confirmations."""
    trial = trial.model_copy(update={"observations": own_rows(trial)})
    over = limits(trial.violations)
    over_sinks = sink_limits(trial.violations)
    bursts = bursts_landed(trial)
    rows = []
    last_seq: dict[str, int] = {}
    for d in sorted(trial.deliveries, key=lambda d: d.seq):
        before, after = effects_around(trial.observations, d.event_id, d.seq, last_seq.get(d.event_id))
        last_seq[d.event_id] = d.seq
        rows.append(
            _row(
                d,
                trial,
                before,
                after,
                over.get(d.event_id),
                burst=bursts.get(d.event_id),
                sinks=over_sinks.get(d.event_id, ()),
            )
        )
    return rows


def trial_view(raw: Any, n: int) -> TrialView:
    """One trial (the `n`-th of its incident) as a TrialView; one that is not a trial record says so."""
    trial, problems = Trial.read_or_problems(raw)
    if trial is None:
        return TrialView(
            trial_id=f"trial-{n}",
            index=n,
            verdict="unknown",
            seed=None,
            event_ids=[],
            started_at="",
            duration_ms=None,
            error="this trial is not a record the lab writes: " + "; ".join(problems[:3]),
            rows=[],
            violations=[],
            confirmations=[],
        )
    return TrialView(
        trial_id=trial.trial_id,
        index=trial.index,
        verdict=trial.verdict,
        seed=trial.seed,
        event_ids=list(trial.event_ids),
        started_at=trial.started_at,
        duration_ms=trial.duration_ms,
        error=trial.error,
        rows=rows_of(trial),
        violations=list(trial.violations),
        confirmations=list(trial.commit_confirmations),
        tries=tries_of(trial),
        objects=object_views(trial),
        moments=moments_of(trial),
        jobs=job_rows(trial),
    )


def trial_views(incident: Incident | None) -> list[TrialView]:
    """Every trial of an incident as a TrialView, in index order."""
    if incident is None:
        return []
    views = [trial_view(t, n) for n, t in enumerate(incident.trials)]
    return sorted(views, key=lambda v: v.index)


def object_rows(view: TrialView, obj: ObjectView) -> list[Row]:
    """An object's deliveries in the order they reached the handler, each with the state and
    effects the lab read right after it."""
    by_seq = {r.seq: r for r in view.rows}
    # The object's recorded at-most-once-per-object limit: a row beyond it is marked (as per event).
    named = [_AT_MOST.match(v.expected) for v in obj.violations if v.invariant == "at-most-once-per-object"]
    limit = next((int(m.group(1)) for m in named if m), None)
    rows, before = [], None
    for step in obj.steps:
        row = by_seq.get(step.seq)
        if row is None:
            continue
        rows.append(
            replace(
                row,
                effects_before=before,
                effects_after=step.effects_after,
                state_after=step.state_after,
                limit=limit,
            )
        )
        before = step.effects_after
    return rows


def event_rows(incident: Incident | None, event_id: str, views: list[TrialView] | None = None) -> list[Row]:
    """Every delivery of one event across the incident's trials, in seq order; for an object's id,
    its deliveries in arrival order with the state read after each (`views`: the incident's
    trial views when the caller has them already)."""
    views = trial_views(incident) if views is None else views
    for view in views:
        for obj in view.objects:
            if obj.object_id == event_id:
                return object_rows(view, obj)
    rows = [r for view in views for r in view.rows if r.event_id == event_id]
    return sorted(rows, key=lambda r: r.seq)


def events_of(incident: Incident | None) -> list[str]:
    """The incident's event ids in trial order, each once; an object's events as its object id."""
    seen: dict[str, None] = {}
    for view in trial_views(incident):
        played = {step.event_id for obj in view.objects for step in obj.steps}
        for obj in view.objects:
            seen.setdefault(obj.object_id, None)
        for event_id in view.event_ids + [r.event_id for r in view.rows]:
            if event_id not in played:
                seen.setdefault(event_id, None)
    return list(seen)
