"""The frozen plan of a run: which trials, which events, which deliveries with which faults.

Everything here is derived from the root seed, so the same seed and options give the same
plan (`acklab plan` prints it; nothing is sent). Event ids are fresh per trial and never
reused across experiments; a resumed run re-plans an unfinished trial with a salt so
that a database that saw its first try cannot confuse the second.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from acklab.harness.errors import SpecError
from acklab.harness.wire.providers import DEFAULT_TIME_COMPRESSION
from acklab.harness.wire.variation import varied_ids

# The range of every knob (inclusive; the same bounds as the experiment spec's schema and the
# CLI's options). Outside it a run would not end (a compression of 1e-300 stretches a retry
# schedule past the heat death of the universe) or would exhaust the machine (a burst of 10^6).
BOUNDS: dict[str, tuple[float, float]] = {
    "time_compression": (1.0, 1e9),
    "max_attempts": (1, 20),
    "burst": (2, 256),
    "overlap_ratio": (0.01, 0.99),
    "processing_delay_ms": (1, 60_000),
    "settle_ms": (0.0, 10_000.0),
    "handler_timeout_s": (1.0, 600.0),
}
MAX_TRIALS = 10_000
# How a burst's deliveries are released (harness.core.bursts): each after its own connect (none),
# the last byte of every pre-sent request in one loop (last-byte), or every request as a
# stream of one HTTP/2 connection, their last frames in one packet (single-packet).
BURST_SYNCS = ("none", "last-byte", "single-packet")


@dataclass(frozen=True)
class RunSettings:
    """Knobs of a run's experiments (recorded in every incident's ``experiment.parameters``)."""

    time_compression: float = DEFAULT_TIME_COMPRESSION
    max_attempts: int = 4  # per event; bounds a trial against a handler that never answers 2xx
    burst: int = 16  # concurrent-duplicates
    overlap_ratio: float = 0.5  # timeout-overlap: first timeout = ratio x measured handler latency
    processing_delay_ms: int = 250  # timeout-overlap on the fixture: simulated work per delivery
    settle_ms: float = 50.0  # quiescence: effects must read the same over this window (--settle-ms)
    # How long the lab waits for a handler's answer to one delivery, exactly (--handler-timeout):
    # a hanging target costs this much per delivery, no more.
    handler_timeout_s: float = 30.0
    burst_sync: str = "last-byte"  # concurrent-duplicates and the explorer's bursts: BURST_SYNCS

    def __post_init__(self) -> None:
        for name, (low, high) in BOUNDS.items():
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
                raise SpecError(
                    f"{name}: got {value!r}; expected a number from {low:g} to {high:g} "
                    f"(--{name.replace('_', '-')} or an experiment spec's parameters.{name})"
                )
        if self.burst_sync not in BURST_SYNCS:
            raise SpecError(
                f"burst_sync: got {self.burst_sync!r}; expected one of {', '.join(BURST_SYNCS)} "
                "(--burst-sync or an experiment spec's parameters.burst_sync)"
            )

    def as_dict(self) -> dict[str, Any]:
        return {
            "handler_timeout_s": self.handler_timeout_s,
            "time_compression": self.time_compression,
            "max_attempts": self.max_attempts,
            "burst": self.burst,
            "overlap_ratio": self.overlap_ratio,
            "processing_delay_ms": self.processing_delay_ms,
            "settle_ms": self.settle_ms,
            "burst_sync": self.burst_sync,
        }


@dataclass(frozen=True)
class PlannedDelivery:
    """One delivery the trial will (or, for retries, may) send."""

    event: int  # index into the trial's event ids
    kind: str
    attempt: int
    fault: str
    at_ms: float  # offset from the event's first attempt (compressed schedule)
    when: str  # "always", "until acknowledged", "after quiescence"

    def as_dict(self) -> dict[str, Any]:
        return {
            "event": self.event,
            "kind": self.kind,
            "attempt": self.attempt,
            "fault": self.fault,
            "at_ms": round(self.at_ms, 3),
            "when": self.when,
        }


@dataclass(frozen=True)
class TrialPlan:
    """One trial: its id, its fresh events and its planned deliveries."""

    trial_id: str
    experiment: str
    index: int
    event_ids: tuple[str, ...]
    order_ids: tuple[str, ...]
    deliveries: tuple[PlannedDelivery, ...]
    salt: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "trial_id": self.trial_id,
            "experiment": self.experiment,
            "index": self.index,
            "event_ids": list(self.event_ids),
            "deliveries": [d.as_dict() for d in self.deliveries],
        }


@dataclass(frozen=True)
class Skipped:
    """An experiment, or one variant of it, that does not apply to the target: listed, never judged."""

    name: str
    reason: str
    variant: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            **({"variant": self.variant} if self.variant else {}),
            "reason": self.reason,
        }


@dataclass(frozen=True)
class RunPlan:
    """Every trial of a run (or of one shard of it), in execution order."""

    target: str
    seed: int
    trials_per_experiment: int
    experiments: tuple[str, ...]
    shard: tuple[int, int] | None
    settings: RunSettings
    trials: tuple[TrialPlan, ...] = field(default=())
    skipped: tuple[Skipped, ...] = ()

    @property
    def shard_label(self) -> str | None:
        return f"{self.shard[0]}/{self.shard[1]}" if self.shard else None

    def as_dict(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "seed": self.seed,
            "trials_per_experiment": self.trials_per_experiment,
            "experiments": list(self.experiments),
            "shard": self.shard_label,
            "parameters": self.settings.as_dict(),
            "skipped": [s.as_dict() for s in self.skipped],
            "trials": [t.as_dict() for t in self.trials],
        }


def derive(seed: int, *parts: object) -> str:
    """A stable hex digest of the seed and `parts` (ids are derived, never random)."""
    material = "/".join([str(seed), *map(str, parts)])
    return hashlib.sha256(material.encode()).hexdigest()


def event_ids(
    seed: int, experiment: str, index: int, count: int, salt: str = "", *, vary: bool = False
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The events' ids and order ids; `vary`: in formats and lengths drawn from the seed
    (`harness.wire.variation`), for targets whose template the lab owns."""
    digests = [derive(seed, experiment, index, k, salt) for k in range(count)]
    if vary:
        pairs = [varied_ids(d) for d in digests]
        return tuple(e for e, _ in pairs), tuple(o for _, o in pairs)
    return tuple(f"evt_{d[:24]}" for d in digests), tuple(f"ord_{d[24:40]}" for d in digests)


def trial_id(experiment: str, index: int) -> str:
    return f"{experiment}-{index:04d}"


def parse_shard(text: str | None) -> tuple[int, int] | None:
    """``I/N`` (1-based) -> (I, N); the usual CI ``parallel:matrix`` split."""
    if text is None:
        return None
    left, sep, right = text.partition("/")
    if not sep or not left.isdigit() or not right.isdigit() or not 1 <= int(left) <= int(right):
        raise SpecError(f"--shard: got {text!r}; expected I/N with 1 <= I <= N, e.g. 2/4")
    return int(left), int(right)


def in_shard(position: int, shard: tuple[int, int] | None) -> bool:
    """Round-robin: trial `position` of the full plan belongs to shard I of N when position % N == I-1."""
    return shard is None or position % shard[1] == shard[0] - 1


def select(trials: Iterable[TrialPlan], shard: tuple[int, int] | None) -> tuple[TrialPlan, ...]:
    return tuple(t for position, t in enumerate(trials) if in_shard(position, shard))
