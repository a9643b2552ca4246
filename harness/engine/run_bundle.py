"""The bundle of a run while it executes: the preliminary run.json, one checkpoint per
finished trial, and the final incidents, run.json, JUnit report and manifest; and the
reading of an interrupted bundle for ``--resume``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from acklab.evidence.bundle import BundleWriter
from acklab.evidence.errors import EvidenceError
from acklab.evidence.loading import load_evidence_json
from acklab.evidence.validate import validate
from acklab.harness.core.plan import RunPlan
from acklab.harness.core.run_events import EventBus, ExperimentFinished
from acklab.harness.engine.documents import incident, incident_id, run_document, run_entry, skipped_entry
from acklab.harness.errors import SpecError
from acklab.harness.experiments import Experiment
from acklab.harness.targets import Target

# Between an interrupted process's service.log and the resumed one's.
RESUMED_MARK = b"\n--- acklab: the run was interrupted here and resumed by another process ---\n"


@dataclass
class RunState:
    """The state of one run while it executes."""

    run_id: str
    plan: RunPlan
    target: Target
    experiments: list[Experiment]
    writer: BundleWriter
    bus: EventBus
    started_at: str
    finished: dict[str, dict[str, Any]]
    skipped: dict[str, str] = field(default_factory=dict)  # experiments that do not apply: name -> why

    def _skipped_entries(self) -> list[dict[str, Any]]:
        return [skipped_entry(name, why) for name, why in self.skipped.items()]

    def preliminary(self) -> None:
        entries = [run_entry(e.name, [], None, "not finished") for e in self.experiments]
        entries += self._skipped_entries()
        doc = run_document(
            run_id=self.run_id,
            plan=self.plan,
            status="interrupted",
            started_at=self.started_at,
            experiments=entries,
        )
        self.writer.write_json("run.json", doc, kind="run")

    def keep_attachments(self) -> None:
        """Write the target's files (a spec service's ``service.log``) into the bundle.

        Called when the run finishes and when it is interrupted: the service that served the
        finished trials is stopped with this process, and its output would be lost with it. A
        resumed run's file follows the interrupted one's, so the log covers every process.
        """
        for rel, data in self.target.attachments().items():
            earlier = self.writer.root / rel
            before = (
                earlier.read_bytes() + RESUMED_MARK if earlier.is_file() and not earlier.is_symlink() else b""
            )
            self.writer.write_bytes(rel, before + data)

    def checkpoint(self, record: dict[str, Any]) -> str:
        rel = f"trials/{record['trial_id']}.json"
        self.writer.write_json(rel, record, kind="trial")
        self.finished[record["trial_id"]] = record
        return rel

    def finish(self, sockets: dict[str, bool], parameters: dict[str, dict[str, Any]]) -> dict[str, Any]:
        entries, incidents = [], []
        for experiment in self.experiments:
            ids = [t.trial_id for t in self.plan.trials if t.experiment == experiment.name]
            trials = [self.finished[i] for i in ids if i in self.finished]
            if not ids:
                continue
            doc = incident(
                run_id=self.run_id,
                plan=self.plan,
                target=self.target,
                experiment=experiment,
                trials=trials,
                socket=sockets.get(experiment.name, False),
                parameters=parameters.get(experiment.name, {}),
            )
            rel = f"incidents/{incident_id(self.run_id, experiment.name)}.json"
            self.writer.write_json(rel, doc, kind="incident")
            incidents.append(doc)
            entries.append(
                run_entry(
                    experiment.name,
                    trials,
                    rel,
                    skipped_variants=experiment.skipped_variants(self.target),
                )
            )
            self.bus.emit(
                ExperimentFinished(
                    self.run_id,
                    experiment.name,
                    entries[-1]["verdict"],
                    len(trials),
                    len(entries[-1]["violations"]),
                )
            )
        run = run_document(
            run_id=self.run_id,
            plan=self.plan,
            status="complete",
            started_at=self.started_at,
            experiments=entries + self._skipped_entries(),
        )
        self.keep_attachments()
        self.writer.write_json("run.json", run, kind="run")
        self.writer.write_bytes("reports/junit.xml", junit(run, incidents))
        self.writer.finalize()
        return run


def junit(run: dict[str, Any], incidents: list[dict[str, Any]]) -> bytes:
    from acklab.evidence.reports.junit import experiments_junit

    return experiments_junit(run, incidents)


def load_resume(out: Path, run_id: str, target: Target) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    bundle = out / run_id
    path = bundle / "run.json"
    if not path.is_file():
        raise SpecError(f"--resume {run_id!r}: no {path}; pass the same --out as the interrupted run")
    try:
        run = load_evidence_json(path)
        validate("run", run, what=str(path))
    except (OSError, ValueError, EvidenceError) as exc:
        raise SpecError(f"--resume {run_id!r}: {path} is unreadable: {exc}") from exc
    if run["status"] == "complete":
        raise SpecError(
            f"--resume {run_id!r}: that run is complete (verdict {run['verdict']}); nothing to resume"
        )
    if run["target"] != target.name:
        raise SpecError(
            f"--resume {run_id!r}: the run's target is {run['target']!r}, got --target {target.name!r}; pass the same target"
        )
    finished = {}
    for trial_file in sorted((bundle / "trials").glob("*.json")):
        try:
            record = load_evidence_json(trial_file)
            validate("trial", record, what=str(trial_file))
        except (OSError, ValueError, EvidenceError):
            continue  # a torn or foreign file is not a finished trial; it is rerun
        finished[record["trial_id"]] = record
    return run, finished
