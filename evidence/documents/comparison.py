"""The comparison document (``comparison.json``): one plan run against several targets.

``acklab run --compare-with`` writes it beside the run bundles it moved into the
comparison's directory; the console pairs their incidents delivery by delivery.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Final, Literal

from pydantic import Field

from .base import Document
from .records import Timestamp
from .run import RunDocument, RunId
from .verdicts import Verdict

COMPARISON_SCHEMA: Final = "acklab/comparison/v1"


class ComparisonRun(Document):
    """One target's run bundle inside the comparison."""

    SCHEMA = "comparison#/properties/runs/items"

    target: str
    run_id: str
    bundle: RunId
    verdict: Verdict


class ComparisonDocument(Document):
    """The one seed, the experiments, and each target's run (``--target`` first)."""

    SCHEMA = "comparison"

    schema_: Literal["acklab/comparison/v1"] = Field(alias="schema")
    comparison_id: RunId
    seed: int
    trials_per_experiment: Annotated[int, Field(ge=1)]
    experiments: list[str]
    targets: Annotated[list[str], Field(min_length=2)]
    started_at: Timestamp
    ended_at: Timestamp
    runs: list[ComparisonRun]

    @classmethod
    def build(
        cls,
        *,
        comparison_id: str,
        seed: int,
        targets: Sequence[str],
        runs: Sequence[tuple[RunDocument, str]],
        started_at: str,
        ended_at: str,
    ) -> ComparisonDocument:
        """The comparison of `runs` (each run's document and its bundle's directory name)."""
        first = runs[0][0]
        return cls(
            schema=COMPARISON_SCHEMA,
            comparison_id=comparison_id,
            seed=seed,
            trials_per_experiment=first.trials_per_experiment or 1,
            experiments=[e.name for e in first.experiments],
            targets=list(targets),
            started_at=started_at,
            ended_at=ended_at,
            runs=[
                ComparisonRun(target=run.target, run_id=run.run_id, bundle=bundle, verdict=run.verdict)
                for run, bundle in runs
            ],
        )
