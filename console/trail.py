"""The repair trail as a reader needs it: checks, experiment results, and before/after the patch.

trail.json fixes the checkpoints' envelope (name, status, decision, timings) but leaves each
checkpoint's `outputs` free. The repair flow records its experiments, verify checks and
strike-again comparisons there with the models of `acklab.evidence.documents.trail`
(`LabExperiment`, `CheckRecord`, `StrikeComparison`); those are read back here with the
same models, and anything else is still shown, as it is, among the checkpoint's outputs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

from acklab.evidence.documents.trail import (
    Checkpoint,
    CheckRecord,
    LabExperiment,
    LabLatency,
    StrikeComparison,
)


@dataclass(frozen=True)
class Outcome:
    """One experiment's result on one side of the patch."""

    verdict: str | None
    violations: Any = None
    p50_ms: float | None = None
    p95_ms: float | None = None
    href: str | None = None
    raw: Any = None


@dataclass(frozen=True)
class Change:
    """An experiment before and after the patch (`status`: held, gap, regression ... when recorded)."""

    checkpoint: str
    what: str
    before: Outcome | None
    after: Outcome | None
    status: str | None = None


@dataclass(frozen=True)
class Check:
    """A verify command: what ran, how it ended, where its log is."""

    name: str
    status: str
    exit_code: Any
    duration_ms: Any
    command: str
    log_href: str | None


def _latency(latency: LabLatency | None) -> tuple[float | None, float | None]:
    return (latency.p50_ms, latency.p95_ms) if latency is not None else (None, None)


def outcome(value: Any, incident_href: Callable[[str], str | None]) -> Outcome:
    """An Outcome from an experiment record, a bare verdict string, or anything else (kept raw)."""
    if isinstance(value, str):
        return Outcome(verdict=value)
    record, _ = LabExperiment.read_or_problems(value)
    return Outcome(verdict=None, raw=value) if record is None else _outcome(record, incident_href)


def _outcome(record: LabExperiment, incident_href: Callable[[str], str | None]) -> Outcome:
    p50, p95 = _latency(record.latency)
    return Outcome(
        verdict=record.verdict,
        violations=record.violations,
        p50_ms=p50,
        p95_ms=p95,
        href=incident_href(record.incident) if record.incident else None,
    )


def _records(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def experiments(
    outputs: Mapping[str, Any], incident_href: Callable[[str], str | None]
) -> list[tuple[str, Outcome]]:
    """(name, outcome) of every experiment record in a checkpoint's outputs."""
    found = [LabExperiment.read_or_problems(e)[0] for e in _records(outputs.get("experiments"))]
    # not the before/after comparisons strike-again lists (those are StrikeComparisons)
    return [(e.name, _outcome(e, incident_href)) for e in found if e is not None]


def checks(outputs: Mapping[str, Any], log_href: Callable[[str], str | None]) -> list[Check]:
    """The verify commands recorded in a checkpoint's outputs."""
    found = []
    for raw in _records(outputs.get("checks")):
        record, _ = CheckRecord.read_or_problems(raw)
        if record is None:
            continue  # shown among the checkpoint's outputs, as it is
        found.append(
            Check(
                name=record.name,
                status=record.status,
                exit_code=record.exit_code,
                duration_ms=record.duration_ms,
                command=" ".join(record.argv),
                log_href=log_href(record.log) if record.log else None,
            )
        )
    return found


def changes(checkpoints: Sequence[Checkpoint], incident_href: Callable[[str], str | None]) -> list[Change]:
    """Every before/after pair the checkpoints record: aimed experiments, strike-again runs, plain maps."""
    rows: list[Change] = []
    for cp in checkpoints:
        outputs = cp.outputs
        comparisons = _records(outputs.get("aimed")) + _records(outputs.get("experiments"))
        for compared in comparisons:
            c, _ = StrikeComparison.read_or_problems(compared)
            if c is None:
                continue
            b50, b95 = _latency(c.latency_before)
            a50, a95 = _latency(c.latency_after)
            before = Outcome(c.before, p50_ms=b50, p95_ms=b95)
            after = Outcome(c.after, c.violations_after, a50, a95)
            rows.append(Change(cp.name, c.experiment, before, after, c.status))
        holders = [
            (k, v) for k, v in outputs.items() if isinstance(v, dict) and {"before", "after"} <= set(v)
        ]
        if {"before", "after"} <= set(outputs):
            holders.append(("", outputs))
        for label, holder in holders:
            rows += _pair_up(cp.name, label, holder.get("before"), holder.get("after"), incident_href)
    return _merged(rows)


def _merged(rows: list[Change]) -> list[Change]:
    """One row per (checkpoint, experiment): a comparison record and the runs behind it describe the same thing."""
    found: dict[tuple[str, str], Change] = {}
    for row in rows:
        key = (row.checkpoint, row.what)
        old = found.get(key)
        found[key] = (
            row
            if old is None
            else Change(
                row.checkpoint,
                row.what,
                _join(old.before, row.before),
                _join(old.after, row.after),
                old.status or row.status,
            )
        )
    return list(found.values())


def _join(first: Outcome | None, second: Outcome | None) -> Outcome | None:
    if first is None or second is None:
        return first or second
    values = {f.name: getattr(first, f.name) for f in fields(Outcome)}
    return Outcome(**{k: v if v is not None else getattr(second, k) for k, v in values.items()})


def _pair_up(
    checkpoint: str, label: str, before: Any, after: Any, incident_href: Callable[[str], str | None]
) -> list[Change]:
    b = before if isinstance(before, dict) else {}
    a = after if isinstance(after, dict) else {}
    if isinstance(b.get("experiments"), list) or isinstance(a.get("experiments"), list):
        left, right = dict(experiments(b, incident_href)), dict(experiments(a, incident_href))
        return [
            Change(checkpoint, n, left.get(n), right.get(n))
            for n in list(left) + [n for n in right if n not in left]
        ]
    if b or a:
        keys = list(b) + [k for k in a if k not in b]
        return [
            Change(checkpoint, f"{label}.{k}".strip("."), outcome(b[k], incident_href) if k in b else None,
                   outcome(a[k], incident_href) if k in a else None)
            for k in keys
        ]  # fmt: skip
    return [
        Change(checkpoint, label or "value", outcome(before, incident_href), outcome(after, incident_href))
    ]
