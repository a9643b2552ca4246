"""The repair trail as a reader needs it: checks, experiment results, and before/after the patch.

trail.json fixes the checkpoints' envelope (name, status, decision, timings) but leaves each
checkpoint's `outputs` free. The repair flow records experiments as
`{name, verdict, violations, trials, latency: {p50_ms, p95_ms}, incident}`, verify checks as
`{name, status, exit_code, duration_ms, argv, log}`, and strike-again as `before`/`after`
runs plus the `aimed` experiments; those shapes are recognised here, and anything else is
still shown, generically, on the page.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

from .coerce import as_dict, as_list, as_str


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


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def outcome(value: Any, incident_href: Callable[[str], str | None]) -> Outcome:
    """An Outcome from an experiment record, a bare verdict string, or anything else (kept raw)."""
    if isinstance(value, str):
        return Outcome(verdict=value)
    record = as_dict(value)
    if not record:
        return Outcome(verdict=None, raw=value)
    p50, p95 = _latency(record.get("latency"))
    incident = as_str(record.get("incident"))
    return Outcome(
        verdict=as_str(record.get("verdict")) or None,
        violations=record.get("violations"),
        p50_ms=p50,
        p95_ms=p95,
        href=incident_href(incident) if incident else None,
    )


def experiments(
    outputs: dict[str, Any], incident_href: Callable[[str], str | None]
) -> list[tuple[str, Outcome]]:
    """(name, outcome) of every experiment record in a checkpoint's outputs."""
    return [
        (as_str(e.get("name"), "?"), outcome(e, incident_href))
        for e in as_list(outputs.get("experiments"))
        if isinstance(e, dict) and "name" in e  # not the before/after comparisons strike-again lists
    ]


def checks(outputs: dict[str, Any], log_href: Callable[[str], str | None]) -> list[Check]:
    """The verify commands recorded in a checkpoint's outputs."""
    found = []
    for raw in as_list(outputs.get("checks")):
        c = as_dict(raw)
        if not c:
            continue
        argv = c.get("argv")
        command = " ".join(str(a) for a in argv) if isinstance(argv, list) else as_str(argv)
        log = as_str(c.get("log"))
        found.append(
            Check(
                name=as_str(c.get("name"), "?"),
                status=as_str(c.get("status"), "unknown"),
                exit_code=c.get("exit_code"),
                duration_ms=c.get("duration_ms"),
                command=command,
                log_href=log_href(log) if log else None,
            )
        )
    return found


def changes(checkpoints: list[dict[str, Any]], incident_href: Callable[[str], str | None]) -> list[Change]:
    """Every before/after pair the checkpoints record: aimed experiments, strike-again runs, plain maps."""
    rows: list[Change] = []
    for cp in checkpoints:
        name = as_str(cp.get("name"), "?")
        outputs = as_dict(cp.get("outputs"))
        comparisons = as_list(outputs.get("aimed")) + as_list(outputs.get("experiments"))
        for compared in comparisons:
            a = as_dict(compared)
            if "experiment" in a and ({"before", "after"} & set(a)):
                b50, b95 = _latency(a.get("latency_before"))
                a50, a95 = _latency(a.get("latency_after"))
                before = Outcome(as_str(a.get("before")) or None, p50_ms=b50, p95_ms=b95)
                after = Outcome(as_str(a.get("after")) or None, a.get("violations_after"), a50, a95)
                rows.append(
                    Change(
                        name, as_str(a.get("experiment"), "?"), before, after, as_str(a.get("status")) or None
                    )
                )
        holders = [
            (k, as_dict(v))
            for k, v in outputs.items()
            if isinstance(v, dict) and {"before", "after"} <= set(v)
        ]
        if {"before", "after"} <= set(outputs):
            holders.append(("", outputs))
        for label, holder in holders:
            rows += _pair_up(name, label, holder.get("before"), holder.get("after"), incident_href)
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


def _latency(value: Any) -> tuple[float | None, float | None]:
    latency = as_dict(value)
    return _number(latency.get("p50_ms")), _number(latency.get("p95_ms"))


def _pair_up(
    checkpoint: str, label: str, before: Any, after: Any, incident_href: Callable[[str], str | None]
) -> list[Change]:
    b, a = as_dict(before), as_dict(after)
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
