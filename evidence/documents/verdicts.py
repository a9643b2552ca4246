"""Verdict words and how they combine: one precedence for a trial, an experiment, a run, a merge.

A proven violation outweighs an error elsewhere (docs/concepts.md#precedence): ``fail``
beats ``error`` beats ``pass``; ``skipped`` (an experiment that does not apply) counts for
nothing, and nothing judged at all is an ``error``.

The names a verdict is about live here too, one list each: `Invariant` and `ExperimentName`.
Everything else that lists them (the harness's registry, the experiment spec's schema, the
console's column order, mypy's view of each experiment's ``name``) reads or is checked
against these (``tests/test_names.py``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal, get_args

Verdict = Literal["pass", "fail", "error"]
ExperimentVerdict = Literal["pass", "fail", "error", "skipped"]
Invariant = Literal[
    "at-most-once-effect",
    "acked-exactly-once",
    "eventually-acknowledged",
    "conflict-rejected",
    "replay-rejected",
    "no-2xx-without-commit",
    # beyond one event (harness.core.object_verdicts)
    "newest-state-wins",
    "state-never-regresses",
    "at-most-once-per-object",
    "schema-unchanged",
    # effects outside the database (harness.sinks)
    "idempotent-outbound",
    "no-effect-without-commit",
    # the provider talks back (docs/provider-api.md): a running total the consumer keeps
    "totals-match",
]
INVARIANTS: tuple[str, ...] = get_args(Invariant)
# Every stable experiment name, in the order a reader meets them (the order runs, tables and
# the console's columns follow). A new experiment is one line here, its class in the
# registry (harness/experiments/__init__.py) and its name in experiment.schema.json's `uses`.
ExperimentName = Literal[
    "lost-ack",
    "lost-ack-reset",
    "timeout-overlap",
    "concurrent-duplicates",
    "conflicting-payload",
    "replay",
    # beyond one event (docs/beyond-one-event.md)
    "out-of-order",
    "sibling-events",
    "race-with-request",
    # deeper faults, run only when named
    "crash-after-commit",
    "crash-mid-transaction",
    "crash-after-ack",
    "db-latency",
    "db-reset",
    "db-blackhole",
    # the provider talks back (docs/provider-api.md), run only when named
    "fetch-lag",
    "fetch-stale",
    "fetch-throttled",
    "provider-echo",
    "effect-failure",
    # signatures as providers send them (docs/signatures.md), run only when named
    "key-rotation",
    "raw-bytes",
    "clock-skew",
    # behind a queue (docs/queues.md), run only when named, on a consumer with workers: and queues:
    "worker-crash-after-effect",
    "visibility-timeout",
    "late-duplicate-job",
    "broker-restart",
    "enqueue-lost",
    # beyond one process (docs/fleet.md), run only when named; the clock experiments last: the
    # consumer's clock only moves forward, and every later delivery is signed at its time
    "replica-duplicates",
    "restart-redelivery",
    "late-redelivery",
    "provider-retries",
]
EXPERIMENT_NAMES: tuple[ExperimentName, ...] = get_args(ExperimentName)
# Most telling first: a tuple, not a dict keyed by "pass" (bandit reads that as a password).
PRECEDENCE: tuple[Verdict, ...] = ("fail", "error", "pass")


def rank(verdict: str) -> int:
    """Where `verdict` stands in `PRECEDENCE` (0: fail); anything else after them."""
    return PRECEDENCE.index(verdict) if verdict in PRECEDENCE else len(PRECEDENCE)


def combine(verdicts: Iterable[str]) -> Verdict:
    """fail if any failed, else error if any erred (or nothing was judged), else pass."""
    judged = [v for v in verdicts if v != "skipped"]
    if not judged:
        return "error"
    if "fail" in judged:
        return "fail"
    return "error" if "error" in judged else "pass"
