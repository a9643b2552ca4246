"""Latency figures: one percentile for every reader and writer of acklab.

**Nearest rank** (docs/evidence.md): the p-th percentile of n latencies is the value at rank
⌈p/100 · n⌉ of the sorted list, so a reported p50 or p95 is a latency that happened, never a
mean of two. For 1, 2, …, 10 ms the p50 is 5 ms and the p95 10 ms. The harness writes an
incident's ``summary.latency_ms`` with it, the merge recomputes a split incident's with it,
the console draws its charts with it and the repair flow compares runs with it.

Which deliveries count: those the handler answered (``status`` not null). An attempt that
never got an answer has no latency of the handler, only of the lab's waiting.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .base import Document, Omit

DIGITS = 3  # milliseconds to the microsecond, as every record writes them


def percentile(values: Sequence[float], p: float) -> float:
    """The nearest-rank `p`-th percentile (0 < p <= 100) of a non-empty sequence."""
    if not values:
        raise ValueError("percentile of no values")
    if not 0 < p <= 100:
        raise ValueError(f"percentile: got p={p!r}; expected 0 < p <= 100")
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[rank - 1]


class LatencyFigures(Document):
    """``summary.latency_ms`` of an incident: p50, p95 and the longest answered delivery
    (an empty object when no delivery was answered)."""

    SCHEMA = "incident#/properties/summary/properties/latency_ms"

    p50: Omit[float] = None
    p95: Omit[float] = None
    max: Omit[float] = None


class Latency(Document):
    """A group of latencies as the readers show them: how many, p50, p95, max (milliseconds)."""

    count: int
    p50: float
    p95: float
    max: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Latency | None:
        """The figures of `values`; None when there are none."""
        if not values:
            return None
        return cls(
            count=len(values),
            p50=round(percentile(values, 50), DIGITS),
            p95=round(percentile(values, 95), DIGITS),
            max=round(max(values), DIGITS),
        )

    def figures(self) -> LatencyFigures:
        return LatencyFigures(p50=self.p50, p95=self.p95, max=self.max)


def answered_latency(delivery: Mapping[str, Any]) -> float | None:
    """The handler's latency of one delivery as JSON holds it; None when it counts for nothing.

    For readers that walk raw records at scale (the console's outline of a 200 MB incident)
    without building a model per delivery; the rule is the one `Delivery.answered_ms` applies.
    """
    value = delivery.get("latency_ms")
    if delivery.get("status") is None or isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def summary_figures(values: Iterable[float]) -> LatencyFigures:
    """An incident's ``summary.latency_ms`` from its answered deliveries' latencies."""
    latency = Latency.of(list(values))
    return latency.figures() if latency is not None else LatencyFigures()


class Spread(Document):
    """How far apart a group of times fell (milliseconds): the p50 and the widest."""

    SCHEMA = "common#/$defs/spread"

    p50: float
    max: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Spread | None:
        """The spread figures of `values`; None when there are none."""
        if not values:
            return None
        return cls(p50=round(percentile(values, 50), DIGITS), max=round(max(values), DIGITS))
