"""The sweep document (``sweep.json``): the target x database x experiment matrix and its runs.

Written by ``acklab sweep`` before its first run, after every run and at the end; read back
by ``--resume``, by the heatmap (`acklab.evidence.heatmap`) and by the console.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Final, Literal

from pydantic import Field

from .base import Document, Omit
from .records import Timestamp
from .run import RunId
from .verdicts import Verdict, combine

SWEEP_SCHEMA: Final = "acklab/sweep/v1"
Count = Annotated[int, Field(ge=0)]
CellVerdict = Literal["pass", "fail", "error", "skipped", "pending"]
RunStatus = Literal["pending", "interrupted", "complete", "error", "skipped"]


class SweepDatabase(Document):
    """One value of the database axis: its label, and its URL with the password redacted."""

    SCHEMA = "sweep#/$defs/database"

    label: str
    url: str | None


class SweepRunRecord(Document):
    """One target on one database: an ordinary run bundle inside the sweep, once it has run."""

    SCHEMA = "sweep#/properties/runs/items"

    target: str
    target_name: str
    database: str
    seed: int
    experiments: list[str]
    run_id: RunId | None
    bundle: str | None
    status: RunStatus
    verdict: Verdict | None
    error: str | None


class SweepCell(Document):
    """One target x database x experiment: its verdict, counts, and the incident behind it."""

    SCHEMA = "sweep#/properties/cells/items"

    target: str
    database: str
    experiment: str
    verdict: CellVerdict
    trials: Count
    passed: Count
    failed: Count
    errors: Count
    violations: Count
    pass_rate: Annotated[float, Field(ge=0, le=1)] | None = None
    run_id: str | None = None
    incident: str | None = None
    reason: str | None = None

    @classmethod
    def build(
        cls,
        *,
        target: str,
        database: str,
        experiment: str,
        verdict: CellVerdict,
        run_id: str | None,
        trials: int = 0,
        passed: int = 0,
        failed: int = 0,
        errors: int = 0,
        violations: int = 0,
        incident: str | None = None,
        reason: str | None = None,
    ) -> SweepCell:
        return cls(
            target=target,
            database=database,
            experiment=experiment,
            verdict=verdict,
            trials=trials,
            passed=passed,
            failed=failed,
            errors=errors,
            violations=violations,
            pass_rate=round(passed / trials, 4) if trials and verdict != "pending" else None,
            run_id=run_id,
            incident=incident,
            reason=reason,
        )


class SweepDocument(Document):
    """``sweep.json``: the matrix, where each run stands, and a cell per run x experiment."""

    SCHEMA = "sweep"

    schema_: Literal["acklab/sweep/v1"] = Field(alias="schema")
    sweep_id: RunId
    status: Literal["complete", "interrupted"]
    verdict: Verdict
    seed: int
    trials_per_experiment: Annotated[int, Field(ge=1)]
    targets: list[str]
    databases: list[SweepDatabase]
    experiments: list[str]
    started_at: Timestamp
    ended_at: Timestamp
    runs: list[SweepRunRecord]
    cells: list[SweepCell]
    settings: Omit[dict[str, Any]] = None
    acklab_version: Omit[str] = None

    @classmethod
    def build(
        cls,
        *,
        sweep_id: str,
        status: Literal["complete", "interrupted"],
        seed: int,
        trials_per_experiment: int,
        targets: Sequence[str],
        databases: Sequence[SweepDatabase],
        experiments: Sequence[str],
        settings: dict[str, Any],
        started_at: str,
        ended_at: str,
        acklab_version: str,
        runs: Sequence[SweepRunRecord],
        cells: Sequence[SweepCell],
    ) -> SweepDocument:
        """The sweep's document; its verdict combines the cells' (skipped ones count for nothing)."""
        return cls(
            schema=SWEEP_SCHEMA,
            sweep_id=sweep_id,
            status=status,
            verdict=combine(c.verdict for c in cells) if status == "complete" else "error",
            seed=seed,
            trials_per_experiment=trials_per_experiment,
            targets=list(targets),
            databases=list(databases),
            experiments=list(experiments),
            settings=settings,
            started_at=started_at,
            ended_at=ended_at,
            acklab_version=acklab_version,
            runs=list(runs),
            cells=list(cells),
        )
