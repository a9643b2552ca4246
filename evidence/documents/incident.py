"""The incident (``incidents/<incident_id>.json``): one target x experiment of a run, with every trial.

`Incident.build` is the one builder: the harness calls it when an experiment's trials are
done, ``acklab explore`` for its shrunk schedule, and the merge for an experiment split
between shards. The verdict, the summary (counts, fault landed, the trials' errors, the
latency) and the violations are computed from the trials here and nowhere else.

`IncidentHead` is an incident without its trials: what the console reads of every incident
(`acklab.console.outline` reads the trials apart, a page at a time).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Annotated, Any, Final, Literal

from pydantic import Field

from .base import Document, Omit
from .latency import LatencyFigures, Spread, summary_figures
from .records import Sha256, SinkSource, Timestamp, Violation
from .trial import Trial
from .verdicts import Verdict, combine

INCIDENT_SCHEMA: Final = "acklab/incident/v1"
REASON_CHARS = 2000
Count = Annotated[int, Field(ge=0)]


def incident_id_of(run_id: str, experiment: str) -> str:
    """An incident's id: namespaced by its run (``<run_id>-<experiment>``, lower case)."""
    return f"{run_id}-{experiment}".lower()


def trial_errors(trials: Iterable[Trial]) -> str | None:
    """The distinct errors of `trials`, in one line (what `summary.reason` says)."""
    errors = sorted({t.error for t in trials if t.error})
    return "; ".join(errors)[:REASON_CHARS] if errors else None


def with_variants(reason: str | None, skipped_variants: Mapping[str, str] | None) -> str | None:
    """`reason`, then each variant that does not apply with why: what a reader needs besides a verdict."""
    parts = [reason] if reason else []
    parts += [f"{name} skipped: {why}" for name, why in (skipped_variants or {}).items()]
    return " | ".join(parts) or None


class IncidentTarget(Document):
    """The code an incident is about: the target, its revision, where it ran (never a credential)."""

    SCHEMA = "incident#/properties/target"

    name: str
    kind: Literal["fixture", "spec", "app"]
    endpoint: str
    handler: str | None = None
    database: str | None = None
    commit_sha: str | None = None
    dirty: Omit[bool] = None
    changes: Omit[Sha256] = None
    listener: Omit[dict[str, Any]] = None
    handler_sha256: Omit[Sha256] = None
    provider: Omit[str] = None
    sinks: Omit[list[SinkSource]] = None  # the sources the target's sinks counted (effects.smtp, ...)


class IncidentExperiment(Document):
    """What was done to the target: the experiment, its parameters, the fault each trial must prove."""

    SCHEMA = "incident#/properties/experiment"

    name: str
    description: str
    time_compression: Omit[Annotated[float, Field(gt=0)]] = None
    parameters: dict[str, Any] = Field(default_factory=dict)
    fault: Omit[str] = None
    skipped_variants: Omit[dict[str, str]] = None


class ArrivalSpread(Document):
    """How close together the bursts of an experiment arrived (concurrent-duplicates), over each
    trial's proving try: the sender's release spread (first to last final byte written) and,
    where the handler reported when each request entered it, the handler's."""

    SCHEMA = "common#/$defs/arrival_spread"

    burst_sync: str
    bursts: Count
    release_ms: Omit[Spread] = None
    handler_ms: Omit[Spread] = None

    @classmethod
    def of(cls, trials: Iterable[Trial]) -> ArrivalSpread | None:
        """The spread of `trials`' bursts; None when none of them sent one."""
        facts = [
            found.facts
            for t in trials
            if t.fault is not None
            and (found := t.fault.proving_try) is not None
            and found.facts is not None
            and "burst_sync" in found.facts
        ]
        if not facts:
            return None

        def spread(key: str) -> Spread | None:
            return Spread.of([float(f[key]) for f in facts if f.get(key) is not None])

        return cls(
            burst_sync=", ".join(sorted({str(f["burst_sync"]) for f in facts})),
            bursts=len(facts),
            release_ms=spread("release_spread_ms"),
            handler_ms=spread("handler_spread_ms"),
        )


class Summary(Document):
    """An incident's counts: trials by verdict, faults landed, the trials' errors, the latency."""

    SCHEMA = "incident#/properties/summary"

    trials: Count
    passed: Count
    failed: Count
    errors: Count
    fault_landed: Omit[Count] = None
    reason: str | None = None
    latency_ms: Omit[LatencyFigures] = None
    arrival_spread: Omit[ArrivalSpread] = None

    @classmethod
    def of(cls, trials: Sequence[Trial]) -> Summary:
        verdicts = [t.verdict for t in trials]
        return cls(
            trials=len(trials),
            passed=verdicts.count("pass"),
            failed=verdicts.count("fail"),
            errors=verdicts.count("error"),
            fault_landed=sum(t.fault is not None and t.fault.landed for t in trials),
            reason=trial_errors(trials),
            latency_ms=summary_figures(ms for t in trials for ms in t.answered_ms),
            arrival_spread=ArrivalSpread.of(trials),
        )


class IncidentHead(Document):
    """An incident without its trials (the console's outline reads those a page at a time)."""

    SCHEMA = "incident"

    schema_: Literal["acklab/incident/v1"] = Field(alias="schema")
    incident_id: Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9._-]*$")]
    run_id: str
    created_at: Timestamp
    target: IncidentTarget
    experiment: IncidentExperiment
    seed: int
    invariants: list[str]
    verdict: Verdict
    summary: Summary
    violations: list[Violation]
    boundary: Annotated[str, Field(min_length=40)]
    schedule: Omit[list[dict[str, Any]]] = None

    @classmethod
    def read_head(cls, doc: Any, *, what: str | None = None) -> IncidentHead:
        """The head of a whole incident document (its trials are not read)."""
        if isinstance(doc, dict):
            doc = {k: v for k, v in doc.items() if k != "trials"}
        return cls.read(doc, what=what)


class Incident(IncidentHead):
    """One target x experiment of a run, with every trial."""

    trials: list[Trial]

    @classmethod
    def build(
        cls,
        *,
        run_id: str,
        target: IncidentTarget,
        experiment: IncidentExperiment,
        seed: int,
        invariants: Sequence[str],
        trials: Sequence[Trial],
        boundary: str,
        created_at: str,
        incident_id: str | None = None,
        verdict: Verdict | None = None,
        schedule: list[dict[str, Any]] | None = None,
    ) -> Incident:
        """The incident of `trials`; `verdict` only where more than the trials is known (a merge)."""
        return cls(
            schema=INCIDENT_SCHEMA,
            incident_id=incident_id or incident_id_of(run_id, experiment.name),
            run_id=run_id,
            created_at=created_at,
            target=target,
            experiment=experiment,
            seed=seed,
            invariants=list(invariants),
            verdict=verdict or combine(t.verdict for t in trials),
            summary=Summary.of(trials),
            violations=[v for t in trials for v in t.violations],
            trials=list(trials),
            boundary=boundary,
            schedule=schedule,
        )
