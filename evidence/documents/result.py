"""The ``acklab run --json`` object (``run-result.schema.json``): what scripts and CI read of a run.

It is the run document with absolute paths, one line of error when the run erred, and
nothing a script has no use for: `RunResultJson.of` builds it from a `RunDocument`,
`RunResultJson.failed` for a run that ended before it had a verdict (exit 3-7: ``verdict``
is ``error`` and ``error`` says why). With ``--compare-with`` it also names the comparison
bundle and carries each compared target's object (`with_comparison`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any

from pydantic import Field

from .base import Document, Omit
from .records import EffectSource, Violation, ViolationDelivery
from .run import RunDocument, RunExperiment
from .verdicts import ExperimentVerdict, Invariant, Verdict

ERROR_CHARS = 4000
NOTHING_JUDGED = "nothing was judged"


class ResultViolation(Document):
    """A violation as ``--json`` shows it (the trial it happened in is in the incident)."""

    SCHEMA = "run-result#/$defs/violation"

    invariant: Invariant
    event_id: str
    observed: int | str | None
    expected: str
    detail: str
    source: Omit[EffectSource] = None
    delivery: Omit[ViolationDelivery] = None

    @classmethod
    def of(cls, violation: Violation) -> ResultViolation:
        return cls(
            invariant=violation.invariant,
            source=violation.source,
            event_id=violation.event_id,
            observed=violation.observed,
            expected=violation.expected,
            detail=violation.detail,
            delivery=violation.delivery,
        )


class ResultExperiment(Document):
    """One experiment: verdict, trials, why it erred or was skipped, faults landed, violations."""

    SCHEMA = "run-result#/$defs/experiment"

    name: str
    verdict: ExperimentVerdict
    trials: Annotated[int, Field(ge=0)]
    reason: str | None
    fault_landed: Annotated[int, Field(ge=0)]
    violations: list[ResultViolation]
    incident: str | None
    skipped_variants: Omit[dict[str, str]] = None

    @classmethod
    def of(cls, entry: RunExperiment, bundle: str) -> ResultExperiment:
        # An older run.json (resumed) may predate `reason`: its error said why.
        reason = entry.reason if "reason" in entry.model_fields_set else entry.error
        return cls(
            name=entry.name,
            verdict=entry.verdict,
            trials=entry.trials,
            reason=reason,
            fault_landed=entry.fault_landed or 0,
            violations=[ResultViolation.of(v) for v in entry.violations],
            incident=f"{bundle}/{entry.incident}" if entry.incident else None,
            skipped_variants=entry.skipped_variants or None,
        )


class RunResultJson(Document):
    """The one JSON object ``acklab run --json`` prints, on success and on error alike."""

    SCHEMA = "run-result"

    run_id: str | None
    verdict: Verdict
    target: str
    error: str | None
    experiments: list[ResultExperiment]
    bundle: str | None
    comparison: Omit[str] = None
    compared: Omit[list[RunResultJson]] = None
    warnings: Omit[list[str]] = None

    @classmethod
    def of(cls, run: RunDocument, bundle: str) -> RunResultJson:
        """The object of a run whose bundle is at `bundle` (an absolute path)."""
        error = None
        if run.verdict == "error":
            error = "; ".join(run.errors)[:ERROR_CHARS] or NOTHING_JUDGED
        return cls(
            run_id=run.run_id,
            verdict=run.verdict,
            target=run.target,
            error=error,
            experiments=[ResultExperiment.of(e, bundle) for e in run.experiments],
            bundle=bundle,
            warnings=run.warnings,
        )

    @classmethod
    def failed(cls, target: str, error: str) -> RunResultJson:
        """The object of a run that ended before it had a verdict (exit 3-7)."""
        return cls(run_id=None, verdict="error", target=target, error=error, experiments=[], bundle=None)

    def with_comparison(self, bundle: str, compared: Sequence[RunResultJson]) -> RunResultJson:
        """``--target``'s object, naming the comparison bundle and carrying the compared runs'."""
        return self.but(comparison=bundle, compared=list(compared))

    def printed(self) -> dict[str, Any]:
        """What ``--json`` prints."""
        return self.dump()
