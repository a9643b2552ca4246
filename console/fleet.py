"""Beyond one process, as the console shows it: the restarts of a trial and the consumer's clock
beside the lab's, read from the trial record's ``parameters`` (``restarts``, ``clock_shifts``,
written by restart-redelivery, late-redelivery and provider-retries).

The record is evidence read from disk, hostile until proven otherwise: a value that is not
what the lab writes is left out, never shown raw.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from acklab.evidence.documents.trial import Trial

SHOWN = 50  # moments per trial at most


@dataclass(frozen=True)
class Moment:
    """A restart of the consumer, or a move of its clock, on a trial's timeline."""

    kind: str  # "restart" | "clock"
    at: str  # when, by the lab's clock (UTC)
    text: str


def _iso(unix: Any) -> str | None:
    if isinstance(unix, bool) or not isinstance(unix, int | float):
        return None
    try:
        return datetime.fromtimestamp(float(unix), UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    except (OverflowError, OSError, ValueError):
        return None


def _pids(value: Any) -> str:
    if not isinstance(value, list):
        return "?"
    return ", ".join(str(p) if isinstance(p, int) and not isinstance(p, bool) else "—" for p in value[:16])


def _restart(doc: Any) -> Moment | None:
    if not isinstance(doc, dict) or (at := _iso(doc.get("at_unix"))) is None:
        return None
    took = doc.get("took_ms")
    lasted = f" in {took:.0f} ms" if isinstance(took, int | float) and not isinstance(took, bool) else ""
    return Moment(
        "restart",
        at,
        f"the consumer was stopped and started again{lasted}: processes {_pids(doc.get('pids_before'))} → "
        f"{_pids(doc.get('pids_after'))}",
    )


def _clock(doc: Any) -> Moment | None:
    clock = doc.get("clock") if isinstance(doc, dict) else None
    if not isinstance(clock, dict) or (lab := _iso(clock.get("lab_unix"))) is None:
        return None
    consumer = _iso(clock.get("consumer_unix")) or "unread"
    offset = clock.get("offset_s")
    ahead = (
        f" ({offset / 86_400:g} days ahead)"
        if isinstance(offset, int | float) and not isinstance(offset, bool)
        else ""
    )
    services = doc.get("services_clock_unix")
    shown = ""
    if isinstance(services, dict):
        read = [
            f"{name}: {_iso(value) or 'unread'}"
            for name, value in list(services.items())[:8]
            if isinstance(name, str)
        ]
        shown = f" · services: {', '.join(read)}" if read else ""
    return Moment("clock", lab, f"the lab's clock {lab} · the consumer's clock {consumer}{ahead}{shown}")


def moments_of(trial: Trial) -> list[Moment]:
    """The trial's restarts and clock moves, in the order they happened."""
    parameters = trial.parameters
    restarts = parameters.get("restarts")
    shifts = parameters.get("clock_shifts")
    found = [m for d in (restarts if isinstance(restarts, list) else [])[:SHOWN] if (m := _restart(d))]
    found += [m for d in (shifts if isinstance(shifts, list) else [])[:SHOWN] if (m := _clock(d))]
    return sorted(found, key=lambda m: m.at)[:SHOWN]
