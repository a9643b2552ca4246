"""Executing a sweep: each target x database as an ordinary run, then the index, heatmap and manifest.

Layout. A sweep is the directory ``<out>/<sweep_id>/``::

    sweep.json        the matrix and where each run stands (written first, after every run, last)
    heatmap.svg       per-cell verdict, pass rate, trials and violations (when complete)
    <run_id>/         one ordinary run bundle per target x database (run.json, trials/, ...)
    manifest.json     kind "sweep", over every file above, nested bundles included (last)

A run executes in the evidence directory itself, like ``acklab run`` (so its leases and
events land in ``<out>/journal.sqlite``, where ``acklab janitor`` and ``acklab history``
look), and its finished bundle is renamed into the sweep's directory — a rename within one
file system, so a bundle is in one place or the other, never half in each.

Resume. Every finished trial is a file in its run's bundle (the runner's checkpoint), and
sweep.json records each run's id as soon as the run starts. ``--resume SWEEP_ID`` skips
complete runs, resumes an interrupted run with the runner's own ``--resume`` (which reruns
only the trials without a file) and starts the runs never started.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from acklab.evidence.bundle import BundleWriter, acklab_version
from acklab.evidence.clock import utcnow
from acklab.evidence.documents.incident import IncidentHead
from acklab.evidence.documents.run import RunDocument
from acklab.evidence.documents.sweep import CellVerdict, SweepCell, SweepDocument
from acklab.evidence.errors import EvidenceError
from acklab.evidence.exitcodes import ExitCode
from acklab.evidence.heatmap import sweep_heatmap
from acklab.evidence.loading import load_evidence_json
from acklab.harness.core.plan import RunSettings
from acklab.harness.core.run_events import Consumer, RunEvent, RunStarted
from acklab.harness.engine.interrupts import sigterm_interrupts
from acklab.harness.engine.runner import RunOptions
from acklab.harness.engine.runner import run as run_lab
from acklab.harness.errors import HarnessError, RunInterrupted, SpecError
from acklab.harness.specs.credentials import redact
from acklab.harness.sweep.matrix import SWEEP_FILE, SweepPlan, SweepRun, load_plan, new_plan

HEATMAP_FILE = "heatmap.svg"
SKIPPED: CellVerdict = "skipped"
PENDING: CellVerdict = "pending"


@dataclass(frozen=True)
class SweepOptions:
    """Everything `acklab sweep` takes."""

    targets: tuple[str, ...] = ()
    databases: tuple[str, ...] = ()
    experiments: tuple[str, ...] = ()
    trials: int = 5
    seed: int | None = None
    out: Path = Path("out")
    resume: str | None = None
    allow_remote: bool = False
    settings: RunSettings = field(default_factory=RunSettings)


@dataclass
class SweepResult:
    """The outcome of a sweep: its index document, its directory and the exit code."""

    doc: SweepDocument
    root: Path

    @property
    def verdict(self) -> str:
        return self.doc.verdict

    @property
    def exit_code(self) -> ExitCode:
        return {"pass": ExitCode.OK, "fail": ExitCode.VERDICT_FAILED}.get(self.verdict, ExitCode.LAB_ERROR)

    def as_json(self) -> dict[str, Any]:
        """What ``acklab sweep --json`` prints: the verdict, each cell (paths absolute), the heatmap."""
        keys = (
            "target",
            "database",
            "experiment",
            "verdict",
            "trials",
            "passed",
            "failed",
            "errors",
            "violations",
        )
        root = self.root.resolve()
        return {
            "sweep_id": self.doc.sweep_id,
            "verdict": self.verdict,
            "cells": [
                {
                    **c.model_dump(include=set(keys)),
                    "pass_rate": c.pass_rate,
                    "incident": str(root / c.incident) if c.incident else None,
                }
                for c in self.doc.cells
            ],
            "heatmap": str(root / HEATMAP_FILE),
            "bundle": str(root),
        }


class SweepInterrupted(RunInterrupted):
    """Ctrl-C or SIGTERM during a sweep; finished trials are kept and the sweep resumes (exit 6)."""


def _read(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = load_evidence_json(path)
    return doc


def _cell(run: SweepRun, experiment: str, verdict: CellVerdict, **counts: Any) -> SweepCell:
    reason = counts.pop("reason", None)
    return SweepCell.build(
        target=run.target_name,
        database=run.database.label,
        experiment=experiment,
        verdict=verdict,
        run_id=run.run_id,
        reason=redact(reason) if reason else None,
        **counts,
    )


def _finished_trials(bundle: Path, experiment: str) -> int:
    pattern = re.compile(rf"^{re.escape(experiment)}-\d+\.json$")
    return sum(1 for p in (bundle / "trials").glob("*.json") if pattern.match(p.name))


def cells_of(run: SweepRun, root: Path, out: Path, experiments: Sequence[str]) -> list[SweepCell]:
    """The run's cells, one per experiment of the sweep, read back from its bundle."""
    done: dict[str, SweepCell] = {}
    if run.status == "complete" and run.run_id:
        bundle = root / run.run_id
        path = bundle / "run.json"
        for entry in RunDocument.read(_read(path), what=str(path)).experiments:
            counts: dict[str, Any] = {
                "trials": entry.trials,
                "violations": len(entry.violations),
                "reason": entry.error,
            }
            if entry.incident:
                where = bundle / entry.incident
                summary = IncidentHead.read_head(_read(where), what=str(where)).summary
                counts |= summary.model_dump(include={"trials", "passed", "failed", "errors"})
                counts["incident"] = f"{run.run_id}/{entry.incident}"
            else:
                counts["errors"] = entry.trials
            verdict: CellVerdict = entry.verdict
            done[entry.name] = _cell(run, entry.name, verdict, **counts)
    staged = out / run.run_id if run.run_id else None
    cells = []
    for name in experiments:
        if name in run.skipped:
            cells.append(_cell(run, name, SKIPPED, reason=run.skipped[name]))
        elif name in done:
            cells.append(done[name])
        elif run.status == "error":
            cells.append(_cell(run, name, "error", reason=run.error))
        elif run.status == "complete":  # a run that did not judge it (no trial was planned)
            cells.append(_cell(run, name, "error", reason="the run recorded no trial of this experiment"))
        else:
            finished = _finished_trials(staged, name) if staged and staged.is_dir() else 0
            cells.append(_cell(run, name, PENDING, trials=finished))
    return cells


def sweep_document(
    plan: SweepPlan, root: Path, out: Path, status: str, cache: dict[str, list[SweepCell]] | None = None
) -> SweepDocument:
    """sweep.json; `cache` keeps the cells of complete runs (read once, not at every write)."""
    cache = {} if cache is None else cache
    cells: list[SweepCell] = []
    for run in plan.runs:
        if run.status == "complete" and run.run_id and run.run_id in cache:
            cells += cache[run.run_id]
            continue
        found = cells_of(run, root, out, plan.experiments)
        if run.status == "complete" and run.run_id:
            cache[run.run_id] = found
        cells += found
    return SweepDocument.build(
        sweep_id=plan.sweep_id,
        status="complete" if status == "complete" else "interrupted",
        seed=plan.seed,
        trials_per_experiment=plan.trials,
        targets=plan.targets,
        databases=[db.record() for db in plan.databases],
        experiments=plan.experiments,
        settings=plan.settings.as_dict(),
        started_at=plan.started_at,
        ended_at=utcnow(),
        acklab_version=acklab_version(),
        runs=[r.record() for r in plan.runs],
        cells=cells,
    )


class _Index:
    """Writes sweep.json whenever a run starts or ends (so a kill -9 loses no run id)."""

    def __init__(self, plan: SweepPlan, writer: BundleWriter, out: Path) -> None:
        self.plan, self.writer, self.out = plan, writer, out
        self.current: SweepRun | None = None
        self._cells: dict[str, list[SweepCell]] = {}

    def write(self, status: str = "interrupted") -> SweepDocument:
        doc = sweep_document(self.plan, self.writer.root, self.out, status, self._cells)
        self.writer.write_document(SWEEP_FILE, doc)
        return doc

    def handle(self, event: RunEvent) -> None:
        if isinstance(event, RunStarted) and self.current is not None and self.current.run_id is None:
            self.current.run_id, self.current.status = event.run_id, "interrupted"
            self.write()


def _locate(run: SweepRun, root: Path, out: Path) -> str:
    """Where the run stands on disk: "moved" (in the sweep), "staged" (complete in <out>),
    "resumable" (interrupted in <out>) or "none"."""
    if not run.run_id:
        return "none"
    if (root / run.run_id / "run.json").is_file():
        return "moved"
    staged = out / run.run_id / "run.json"
    if not staged.is_file():
        return "none"
    try:
        status = RunDocument.read(_read(staged)).status
    except (OSError, ValueError, EvidenceError):
        return "none"
    return "staged" if status == "complete" else "resumable"


def _execute(
    run: SweepRun, options: SweepOptions, plan: SweepPlan, index: _Index, consumers: Sequence[Consumer]
) -> None:
    """Run (or resume, or just collect) one target x database, and move its bundle into the sweep."""
    root = index.writer.root
    where = _locate(run, root, options.out)
    if where in ("none", "resumable"):
        resume = run.run_id if where == "resumable" else None
        run.run_id = resume
        index.current = run
        try:
            result = run_lab(
                RunOptions(
                    target=run.target,
                    experiments=run.experiments,
                    trials=plan.trials,
                    seed=run.seed,
                    db=run.database.url,
                    out=options.out,
                    resume=resume,
                    allow_remote=options.allow_remote,
                    settings=plan.settings,
                ),
                [index, *consumers],
            )
        finally:
            index.current = None
        run.run_id = result.run_id
    if run.run_id is None:  # pragma: no cover - every branch above names the run
        raise HarnessError(f"{run.row}: the run left no run id")
    if where != "moved":
        os.replace(options.out / run.run_id, root / run.run_id)
    run.status = "complete"
    run.verdict = RunDocument.read(_read(root / run.run_id / "run.json")).verdict
    index.write()


def prepare_sweep(options: SweepOptions) -> SweepPlan:
    """A new sweep's plan, or an interrupted one's (exit 3/5 errors surface here; nothing is sent)."""
    if options.resume:
        given = (options.targets, options.experiments)
        plan = load_plan(options.out, options.resume, options.databases)
        for what, value, recorded in zip(
            ("--target", "--experiment"), given, (plan.targets, plan.experiments), strict=True
        ):
            if value and set(value) != set(recorded):
                raise SpecError(
                    f"--resume {options.resume}: {what} {', '.join(value)} differs from the sweep's "
                    f"{', '.join(recorded)}; leave it out to resume"
                )
        return plan
    return new_plan(
        targets=options.targets,
        databases=options.databases,
        experiments=options.experiments,
        trials=options.trials,
        seed=options.seed,
        settings=options.settings,
        allow_remote=options.allow_remote,
        started_at=utcnow(),
    )


def run_sweep(
    options: SweepOptions,
    consumers: Sequence[Consumer] = (),
    on_run: Callable[[SweepRun, int, int], None] | None = None,
) -> SweepResult:
    """Run (or resume) a sweep to the end; raise SweepInterrupted (exit 6) on Ctrl-C/SIGTERM."""
    plan = prepare_sweep(options)
    writer = BundleWriter(options.out / plan.sweep_id, kind="sweep", secrets=plan.secrets)
    index = _Index(plan, writer, options.out)
    index.write()
    todo = [r for r in plan.runs if r.status not in ("complete", "skipped")]
    try:
        for number, run in enumerate(todo, 1):
            if on_run is not None:
                on_run(run, number, len(todo))
            try:
                # Installed anew for each run: the runner's event loop resets SIGTERM when it ends.
                with sigterm_interrupts():
                    _execute(run, options, plan, index, consumers)
            except RunInterrupted:
                raise
            except HarnessError as exc:
                if exc.exit_code != ExitCode.LAB_ERROR:
                    raise  # bad input or a refusal is the sweep's, not one cell's
                # The lab could not start this run (database unreachable): its cells are errors.
                run.status, run.error = "error", str(exc)
                index.write()
    except (KeyboardInterrupt, RunInterrupted) as exc:
        index.write()
        hint = " ".join(f"--db {d.record().url!r}" for d in plan.databases if d.password)
        finished = sum(r.status in ("complete", "skipped") for r in plan.runs)
        raise SweepInterrupted(
            f"interrupted: {finished} of {len(plan.runs)} runs are finished and every finished trial is kept; "
            f"resume with: acklab sweep --resume {plan.sweep_id} --out {options.out}"
            + (f" {hint} (with the password: it is never written)" if hint else "")
        ) from exc
    doc = index.write("complete")
    writer.write_bytes(HEATMAP_FILE, sweep_heatmap(doc).encode("utf-8"))
    writer.finalize()
    return SweepResult(doc, writer.root)
