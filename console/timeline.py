"""Delivery timelines: each delivery of a trial with the effects counted before and after it.

The harness records deliveries and observations separately (an observation names the
delivery it follows with `after_seq`), so "effects before/after" is a join done here, once,
for both the incident view and the comparison.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .coerce import as_dict, as_int, as_list, as_str
from .scan import is_faulted


@dataclass(frozen=True)
class Confirmation:
    """lost-ack: the lab saw the commit before handing the sender a synthetic status."""

    seq: int
    confirmed: bool
    effects: int | None
    observed_at: str
    synthetic_status: int | None


@dataclass(frozen=True)
class FaultTry:
    """One try of a trial's fault proof: whether it landed, what shows it, its measurements."""

    number: int
    landed: bool
    evidence: str
    facts: dict[str, str]


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
    confirmation: Confirmation | None

    @property
    def ack_differs(self) -> bool:
        """The sender saw another status than the handler answered (a lost or replaced ack)."""
        return self.status != self.sender_status

    @property
    def over_limit(self) -> bool:
        """More than one effect after this delivery: the at-most-once invariant is broken here."""
        return self.effects_after is not None and self.effects_after > 1


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
    violations: list[dict[str, Any]]
    confirmations: list[Confirmation]
    tries: list[FaultTry] = field(default_factory=list)
    # When a page shows part of the trial: its first row's position and the trial's row count.
    row_offset: int = 0
    row_count: int | None = None

    @property
    def total_rows(self) -> int:
        return self.row_count if self.row_count is not None else len(self.rows)

    @property
    def partial(self) -> bool:
        return self.row_offset > 0 or self.total_rows > len(self.rows)


def _opt_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _opt_num(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def confirmations_of(trial: dict[str, Any]) -> list[Confirmation]:
    """The lost-ack commit confirmations of a trial (entries without a seq are skipped)."""
    out = []
    for raw in as_list(trial.get("commit_confirmations")):
        c = as_dict(raw)
        if _opt_int(c.get("seq")) is None:
            continue
        out.append(
            Confirmation(
                seq=as_int(c.get("seq")),
                confirmed=c.get("confirmed") is True,
                effects=_opt_int(c.get("effects")),
                observed_at=as_str(c.get("observed_at")),
                synthetic_status=_opt_int(c.get("synthetic_status")),
            )
        )
    return out


def _fact(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    return str(value) if isinstance(value, int | str | bool) else "…"


def tries_of(trial: dict[str, Any]) -> list[FaultTry]:
    """The tries of a trial's fault proof (`fault.tries`), each with its evidence and facts."""
    out = []
    for n, raw in enumerate(as_list(as_dict(trial.get("fault")).get("tries")), 1):
        t = as_dict(raw)
        facts = {str(k): _fact(v) for k, v in sorted(as_dict(t.get("facts")).items())[:20]}
        out.append(
            FaultTry(as_int(t.get("try"), n), t.get("landed") is True, as_str(t.get("evidence")), facts)
        )
    return out


def effects_around(
    observations: list[dict[str, Any]], event_id: str, seq: int, previous: int | None
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
        if as_str(obs.get("event_id")) != event_id:
            continue
        after_seq = _opt_int(obs.get("after_seq"))
        position = -1 if after_seq is None else after_seq
        if position == wanted_before:
            before = _opt_int(obs.get("effects"))
        elif position == seq:
            after = _opt_int(obs.get("effects"))
    return before, after


def rows_of(trial: dict[str, Any]) -> list[Row]:
    """The trial's deliveries in seq order, joined with observations and commit confirmations."""
    observations = [as_dict(o) for o in as_list(trial.get("observations"))]
    confirmations = {c.seq: c for c in confirmations_of(trial)}
    rows = []
    last_seq: dict[str, int] = {}
    deliveries = [as_dict(d) for d in as_list(trial.get("deliveries"))]
    for position, d in enumerate(sorted(deliveries, key=lambda d: as_int(d.get("seq"), 0))):
        seq = as_int(d.get("seq"), position)
        event_id = as_str(d.get("event_id"), "?")
        before, after = effects_around(observations, event_id, seq, last_seq.get(event_id))
        last_seq[event_id] = seq
        headers = {str(k): str(v) for k, v in as_dict(d.get("headers")).items()}
        rows.append(
            Row(
                seq=seq,
                event_id=event_id,
                attempt=_opt_int(d.get("attempt")),
                kind=as_str(d.get("kind"), "?"),
                fault=as_str(d.get("fault"), "none"),
                faulted=is_faulted(d),
                sent_at=as_str(d.get("sent_at")),
                latency_ms=_opt_num(d.get("latency_ms")),
                status=_opt_int(d.get("status")),
                sender_status=_opt_int(d.get("sender_status")),
                error=as_str(d.get("error")) or None,
                excerpt=as_str(d.get("response_excerpt")) or None,
                headers=headers,
                effects_before=before,
                effects_after=after,
                confirmation=confirmations.get(seq),
            )
        )
    return rows


def trial_view(raw: Any, n: int) -> TrialView:
    """One trial (the `n`-th of its incident) as a TrialView."""
    t = as_dict(raw)
    return TrialView(
        trial_id=as_str(t.get("trial_id"), f"trial-{n}"),
        index=as_int(t.get("index"), n),
        verdict=as_str(t.get("verdict"), "unknown"),
        seed=_opt_int(t.get("seed")),
        event_ids=[str(e) for e in as_list(t.get("event_ids"))],
        started_at=as_str(t.get("started_at")),
        duration_ms=_opt_num(t.get("duration_ms")),
        error=as_str(t.get("error")) or None,
        rows=rows_of(t),
        violations=[as_dict(v) for v in as_list(t.get("violations"))],
        confirmations=confirmations_of(t),
        tries=tries_of(t),
    )


def trial_views(incident: dict[str, Any]) -> list[TrialView]:
    """Every trial of an incident as a TrialView, in index order."""
    views = [trial_view(raw, n) for n, raw in enumerate(as_list(incident.get("trials")))]
    return sorted(views, key=lambda v: v.index)


def event_rows(incident: dict[str, Any], event_id: str) -> list[Row]:
    """Every delivery of one event across the incident's trials, in seq order."""
    rows = [r for view in trial_views(incident) for r in view.rows if r.event_id == event_id]
    return sorted(rows, key=lambda r: r.seq)


def events_of(incident: dict[str, Any]) -> list[str]:
    """The incident's event ids in trial order, each once."""
    seen: dict[str, None] = {}
    for view in trial_views(incident):
        for event_id in view.event_ids + [r.event_id for r in view.rows]:
            seen.setdefault(event_id, None)
    return list(seen)
