"""Fault proofs: evidence, per try, that an experiment's fault happened as designed.

A verdict is worth what its fault is: a lost-ack trial whose acknowledgement was never lost,
or a timeout-overlap trial whose sender never timed out, tests nothing. So every experiment
says, for each *try* (one fresh event, or one set of events), whether its fault landed and
what shows it — or why it did not:

* lost-ack: the handler answered 2xx, the lab saw its commit, then the sender got the
  synthetic 504 (a 4xx/5xx is handed on as is: nothing to lose);
* lost-ack-reset: every byte of the request was written, then the connection was reset;
* timeout-overlap: the sender's timeout fired while the handler was still working;
* crash-after-commit: the process was killed after the commit was seen, before it answered;
* concurrent-duplicates: at least two duplicates were at the handler at once (the burst's
  arrival spread is recorded);
* conflicting-payload and replay: the adversarial deliveries reached the handler and were
  answered.

A try whose fault did not land is repeated on fresh events, up to `FAULT_TRIES`. The trial
record keeps every try (``fault.tries``, an `acklab.evidence.documents.records.FaultProof`);
verdicts read it (`harness.core.verdicts`): a trial where no try landed is `error` — unless
its records prove a violation anyway.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from acklab.evidence.documents.records import FaultTry

FAULT_TRIES = 3


@dataclass(frozen=True)
class Proof:
    """Whether one try's fault landed, and what shows it (or why it did not)."""

    landed: bool
    evidence: str
    facts: Mapping[str, Any] = field(default_factory=dict)


def landed(evidence: str, **facts: Any) -> Proof:
    return Proof(True, evidence, facts)


def missed(why: str, **facts: Any) -> Proof:
    return Proof(False, why, facts)


def try_record(number: int, event_ids: list[str], proof: Proof) -> FaultTry:
    """One entry of a trial's ``fault.tries``."""
    return FaultTry(
        try_=number,
        event_ids=event_ids,
        landed=proof.landed,
        evidence=proof.evidence,
        facts=dict(proof.facts) if proof.facts else None,
    )
