"""Verdict words and how they combine: one precedence for a trial, an experiment, a run, a merge.

A proven violation outweighs an error elsewhere (README, "Verdict semantics"): ``fail``
beats ``error`` beats ``pass``; ``skipped`` (an experiment that does not apply) counts for
nothing, and nothing judged at all is an ``error``.
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
]
INVARIANTS: tuple[str, ...] = get_args(Invariant)
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
