"""The run document (``run.json``): a run's verdict and one entry per experiment.

An experiment's entry is derived from its incident (`RunExperiment.of_incident`), so the
two can never disagree; an experiment the run did not finish, one that does not apply to
the target, and the entries of a merge have their own builders. The run's verdict combines
its experiments' (`verdicts.combine`): a run that did not complete is an ``error``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Final, Literal

from pydantic import Field

from .base import Document, Omit
from .incident import ArrivalSpread, IncidentHead, with_variants
from .records import Timestamp, Violation
from .verdicts import ExperimentVerdict, Verdict, combine

RUN_SCHEMA: Final = "acklab/run/v1"
RunId = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")]
Count = Annotated[int, Field(ge=0)]
NOT_FINISHED = "not finished"


class RunExperiment(Document):
    """One experiment of a run: its verdict, how many trials, the faults landed, violations, why."""

    SCHEMA = "run#/properties/experiments/items"

    name: str
    verdict: ExperimentVerdict
    trials: Count
    violations: list[Violation]
    incident: str | None
    fault_landed: Omit[Count] = None
    reason: str | None = None
    skipped_variants: Omit[dict[str, str]] = None
    arrival_spread: Omit[ArrivalSpread] = None
    error: str | None = None

    @classmethod
    def of_incident(cls, incident: IncidentHead, path: str, error: str | None = None) -> RunExperiment:
        """The entry of an experiment whose incident is at `path` (relative to the bundle)."""
        verdict = incident.verdict
        errors = incident.summary.reason
        variants = incident.experiment.skipped_variants
        return cls(
            name=incident.experiment.name,
            verdict=verdict,
            trials=incident.summary.trials,
            fault_landed=incident.summary.fault_landed,
            violations=list(incident.violations),
            incident=path,
            error=(error or errors) if verdict != "pass" else None,
            reason=error or with_variants(errors, variants),
            skipped_variants=variants or None,
            arrival_spread=incident.summary.arrival_spread,
        )

    @classmethod
    def unfinished(cls, name: str) -> RunExperiment:
        """An experiment the run has not finished (the preliminary run.json of a run in progress)."""
        return cls._without_trials(name, "error", NOT_FINISHED, error=NOT_FINISHED)

    @classmethod
    def skipped(cls, name: str, why: str) -> RunExperiment:
        """An experiment that does not apply to the target: listed with why, never judged."""
        return cls._without_trials(name, "skipped", why, error=None)

    @classmethod
    def _without_trials(
        cls, name: str, verdict: ExperimentVerdict, reason: str, *, error: str | None
    ) -> RunExperiment:
        return cls(
            name=name, verdict=verdict, trials=0, fault_landed=0, violations=[], incident=None,
            error=error, reason=reason,
        )  # fmt: skip

    @classmethod
    def merged(cls, entries: Sequence[RunExperiment]) -> RunExperiment:
        """Shards' entries of one experiment that left no incident (each an error, or skipped)."""
        verdicts = [e.verdict for e in entries]
        seen: dict[str, Violation] = {}
        for violation in (v for e in entries for v in e.violations):
            seen.setdefault(violation.model_dump_json(by_alias=True), violation)
        landed = [e.fault_landed for e in entries if e.fault_landed is not None]
        return cls(
            name=entries[0].name,
            verdict="skipped" if all(v == "skipped" for v in verdicts) else combine(verdicts),
            trials=sum(e.trials for e in entries),
            fault_landed=sum(landed) if landed else None,
            violations=list(seen.values()),
            incident=None,
            error=next((e.error for e in entries if e.error), None),
            reason=next((e.reason for e in entries if e.reason), None),
        )


class RunDocument(Document):
    """``run.json``: the verdict of a run, and one entry per experiment (paths relative to the bundle)."""

    SCHEMA = "run"

    schema_: Literal["acklab/run/v1"] = Field(alias="schema")
    run_id: RunId
    verdict: Verdict
    status: Literal["complete", "interrupted"]
    target: str
    seed: int
    started_at: Timestamp
    ended_at: Timestamp
    experiments: list[RunExperiment]
    trials_per_experiment: Omit[Annotated[int, Field(ge=1)]] = None
    shard: Annotated[str, Field(pattern=r"^[0-9]+/[0-9]+$")] | None = None
    acklab_version: Omit[str] = None
    # What the lab saw that may make a pass mean less than it says (a sink that heard nothing
    # while rows landed, a service the lab did not start served by another process).
    warnings: Omit[list[Annotated[str, Field(max_length=2000)]]] = None

    @classmethod
    def build(
        cls,
        *,
        run_id: str,
        target: str,
        seed: int,
        status: Literal["complete", "interrupted"],
        started_at: str,
        ended_at: str,
        experiments: Sequence[RunExperiment],
        acklab_version: str,
        trials_per_experiment: int | None = None,
        shard: str | None = None,
        warnings: Sequence[str] = (),
    ) -> RunDocument:
        """The run's document; its verdict combines the experiments' (an unfinished run's is error)."""
        return cls(
            schema=RUN_SCHEMA,
            run_id=run_id,
            verdict=combine(e.verdict for e in experiments) if status == "complete" else "error",
            status=status,
            target=target,
            seed=seed,
            trials_per_experiment=trials_per_experiment,
            shard=shard,
            started_at=started_at,
            ended_at=ended_at,
            acklab_version=acklab_version,
            experiments=list(experiments),
            warnings=list(warnings) or None,
        )

    def experiment(self, name: str) -> RunExperiment | None:
        return next((e for e in self.experiments if e.name == name), None)

    @property
    def errors(self) -> list[str]:
        """``name: reason`` of every experiment that erred."""
        return [f"{e.name}: {e.reason}" for e in self.experiments if e.verdict == "error"]
