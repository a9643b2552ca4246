"""The lab, as the flow sees it: `acklab run --target fixture:live --checkout DIR` (or a user's target
spec, `--target shop.target.yaml --checkout DIR`: its command: serves the checkout), in this process.

The code under test (the head, the patched copy, an option's copy) is never imported here.
The harness serves each checkout's fixture in processes of its own, started from the
checkout (`harness.targets.checkout`), attacks them over a loopback socket and reads the
effects back from their database itself. The verdicts are computed by the flow's own
harness, which no handler can reach: a patch that rewrites the verdict code through
`sys.modules`, or exits early, does so in a process whose word the lab never takes.
`run_lab` checks after every run that no module of the checkout was imported here.

Every served checkout runs in the flow's sandbox (`flows.sandbox`), on a schema the lab creates
from the expected head's models (`schema_from`) and pins; a served copy whose code rewrote its
own files while it ran ends the flow refused (exit 5).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from acklab.evidence.documents.incident import Incident
from acklab.evidence.documents.latency import Latency
from acklab.evidence.documents.records import Violation
from acklab.evidence.documents.trail import LabExperiment, LabLatency, LabRunOutputs
from acklab.evidence.documents.verdicts import PRECEDENCE, combine, rank
from acklab.evidence.errors import EvidenceError
from acklab.evidence.exitcodes import AcklabError, ExitCode
from acklab.evidence.loading import load_evidence_json
from acklab.harness.engine.runner import RunOptions, RunResult
from acklab.harness.engine.runner import run as harness_run
from acklab.harness.errors import RunInterrupted
from acklab.harness.procs.confinement import Confinement

from .errors import FlowError, FlowSpecInvalid, PatchTampered
from .sandbox.watch import Watched

# The file the served fixture imports as its live handler; its launcher refuses any other. A user's
# target (a spec file with command:) serves whatever its command starts; the flow's scope names the file.
HANDLER_FILE = Path("app", "webhooks.py")


@dataclass(frozen=True)
class ExperimentResult:
    """One experiment of a lab run, as the flow weighs it: verdict, violations, latency."""

    name: str
    verdict: str
    trials: int
    violations: tuple[Violation, ...] = ()
    incident: str | None = None
    reason: str | None = None  # why it erred or was skipped
    latency: LabLatency | None = None

    def line(self) -> str:
        """``name: verdict (N violations)``, and the reason when there is one."""
        why = f"; {self.reason}" if self.reason else ""
        return f"{self.name}: {self.verdict} ({len(self.violations)} violations{why})"

    def record(self, incident: str | None = None) -> LabExperiment:
        """What the trail records of it (`incident`: the path to write, when not its own)."""
        return LabExperiment(
            name=self.name,
            verdict=self.verdict,
            trials=self.trials,
            violations=len(self.violations),
            incident=incident if incident is not None else self.incident,
            latency=self.latency,
            reason=self.reason or None,
        )


@dataclass(frozen=True)
class LabRun:
    """One `acklab run` of one checkout."""

    run_id: str
    verdict: str
    target: str
    bundle: str | None
    experiments: dict[str, ExperimentResult]
    exit_code: int
    handler_module: str
    error: str | None = None  # why the run as a whole ended in an error

    def failing(self) -> list[str]:
        return [n for n, e in self.experiments.items() if e.verdict == "fail"]

    def errored(self) -> list[str]:
        return [n for n, e in self.experiments.items() if e.verdict == "error"]

    def outputs(self, relative: dict[str, str | None]) -> LabRunOutputs:
        """What the trail records of the run; `relative` gives each path as the trail writes it."""
        return LabRunOutputs(
            lab_run_id=self.run_id,
            lab_bundle=relative.get(self.bundle or "") if self.bundle else None,
            verdict=self.verdict,
            experiments=[
                e.record(relative.get(e.incident) if e.incident else None) for e in self.experiments.values()
            ],
            handler_module=self.handler_module,
        )


def imported_from(checkout: Path) -> list[str]:
    """Modules of this process loaded from a file inside `checkout` (the lab must have none)."""
    root = checkout.resolve()
    found = []
    for name, module in list(sys.modules.items()):
        where = getattr(module, "__file__", None)
        if where and Path(where).resolve().is_relative_to(root):
            found.append(name)
    return sorted(found)


def run_lab(
    checkout: Path,
    *,
    target: str,
    experiments: Sequence[str],
    trials: int,
    seed: int,
    out: Path,
    sandbox: Confinement,
    schema_from: Path | None = None,
    secrets: Sequence[str] = (),
    db: str | None = None,
    handler: str = str(HANDLER_FILE),
    skip_inapplicable: bool = False,
) -> LabRun:
    """Attack the fixture of `checkout` with `experiments`, served in `sandbox` on a schema made from
    the models of `schema_from`; FlowError (exit 4) when the lab could not run, PatchTampered (exit 5)
    when the served code rewrote its own files.

    `secrets` (the flow's tokens) are refused in everything the run writes, like its own.
    `skip_inapplicable`: an experiment that does not apply to the target is listed as skipped with its
    reason, not refused (strike-again's list is every experiment unless the spec narrows it).
    """
    watch = Watched(sandbox)
    options = RunOptions(
        target=target,
        checkout=checkout,
        experiments=tuple(experiments),
        trials=trials,
        seed=seed,
        out=out.resolve(),
        secrets=tuple(secrets),
        confinement=watch,
        schema_from=schema_from,
        db=db,
        skip_inapplicable=skip_inapplicable,
    )
    try:
        result = harness_run(options)
    except RunInterrupted as exc:
        raise KeyboardInterrupt(str(exc)) from exc
    except AcklabError as exc:
        if exc.exit_code == ExitCode.INVALID_INPUT:
            raise FlowSpecInvalid(f"the lab refused the flow's input: {exc}") from exc
        raise FlowError(f"the lab could not run on {checkout}: {exc}") from exc
    if watch.tampered:
        raise PatchTampered(
            f"the code served from {checkout} rewrote its own files while the lab attacked it: "
            f"{', '.join(watch.tampered[:5])}; what ran is not what was approved"
        )
    leaked = imported_from(checkout)
    if leaked:
        raise FlowError(
            f"the lab imported code of the checkout under test ({', '.join(leaked[:5])}); "
            "its verdicts cannot be trusted"
        )
    return lab_run(result, module=str(checkout.resolve() / handler))


def merged(runs: Sequence[LabRun]) -> LabRun:
    """Runs of the same experiments under several seeds as one: an experiment passes only if it
    passed in every run (`combine`), with every violation and trial counted; the first run's
    identity, bundle and latency."""
    first = runs[0]
    experiments = {}
    for name, result in first.experiments.items():
        every = [run.experiments[name] for run in runs if name in run.experiments]
        worst = min(every, key=lambda e: rank(e.verdict) if e.verdict != "skipped" else len(PRECEDENCE) + 1)
        experiments[name] = ExperimentResult(
            name=name,
            verdict=combine(e.verdict for e in every)
            if any(e.verdict != "skipped" for e in every)
            else "skipped",
            trials=sum(e.trials for e in every),
            violations=tuple(v for e in every for v in e.violations),
            incident=worst.incident,
            reason="; ".join(dict.fromkeys(e.reason for e in every if e.reason)) or None,
            latency=result.latency,
        )
    verdict = combine(run.verdict for run in runs)
    return LabRun(
        run_id=first.run_id,
        verdict=verdict,
        target=first.target,
        bundle=first.bundle,
        experiments=experiments,
        exit_code=max(run.exit_code for run in runs),
        handler_module=first.handler_module,
        error="; ".join(run.error for run in runs if run.error) or None,
    )


def lab_run(result: RunResult, *, module: str) -> LabRun:
    """A LabRun from the harness's own result: its run document, read where it lies."""
    run, bundle = result.document, result.bundle.resolve()
    experiments = {}
    for entry in run.experiments:
        incident = (bundle / entry.incident).resolve() if entry.incident else None
        experiments[entry.name] = ExperimentResult(
            name=entry.name,
            verdict=entry.verdict,
            trials=entry.trials,
            violations=tuple(entry.violations),
            incident=str(incident) if incident else None,
            reason=entry.reason or entry.error,
            latency=latency_of(incident) if incident else None,
        )
    return LabRun(
        run_id=run.run_id,
        verdict=run.verdict,
        target=run.target,
        bundle=str(bundle),
        experiments=experiments,
        exit_code=int(result.exit_code),
        handler_module=module,
        error="; ".join(run.errors) or None if run.verdict == "error" else None,
    )


def latency_of(incident_path: Path) -> LabLatency | None:
    """p50/p95 of an incident's answered deliveries (`evidence.documents.latency`, as the harness's
    summary has them), read bounded; None when the incident holds none or cannot be read."""
    try:
        incident = Incident.read(load_evidence_json(incident_path), what=str(incident_path))
    except (OSError, EvidenceError):
        return None
    latency = Latency.of([ms for trial in incident.trials for ms in trial.answered_ms])
    if latency is None:
        return None
    return LabLatency(p50_ms=latency.p50, p95_ms=latency.p95, deliveries=latency.count)
