"""The bundle of a run while it executes: the preliminary run.json, one checkpoint per
finished trial, and the final incidents, run.json, JUnit report and manifest; and the
reading of an interrupted bundle for ``--resume``.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from acklab.evidence.bundle import BundleWriter, sha256_file
from acklab.evidence.documents.incident import Incident
from acklab.evidence.documents.run import RunDocument, RunExperiment
from acklab.evidence.documents.trial import Trial
from acklab.evidence.errors import EvidenceError, IntegrityError
from acklab.evidence.journal import Journal, TrialCheckpoints, journal_path
from acklab.evidence.loading import load_evidence_json
from acklab.harness.core.plan import RunPlan
from acklab.harness.core.run_events import EventBus, ExperimentFinished, TrialCheckpointed
from acklab.harness.engine.documents import incident, run_document
from acklab.harness.engine.notices import run_warnings
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
    finished: dict[str, Trial]
    skipped: dict[str, str] = field(default_factory=dict)  # experiments that do not apply: name -> why

    def _skipped_entries(self) -> list[RunExperiment]:
        return [RunExperiment.skipped(name, why) for name, why in self.skipped.items()]

    def preliminary(self) -> None:
        entries = [RunExperiment.unfinished(e.name) for e in self.experiments]
        entries += self._skipped_entries()
        doc = run_document(
            run_id=self.run_id,
            plan=self.plan,
            status="interrupted",
            started_at=self.started_at,
            experiments=entries,
        )
        self.writer.write_document("run.json", doc)

    def keep_attachments(self) -> None:
        """Write the target's files (a spec service's ``service.log``, the sinks' ``sinks/*.json``)
        into the bundle.

        Called when the run finishes and when it is interrupted: the service that served the
        finished trials is stopped with this process, and its output would be lost with it. A
        resumed run's file follows the interrupted one's, so the log covers every process.
        """
        for name, log in self.target.sink_logs().items():  # effects.smtp / effects.outbound
            self.writer.write_document(f"sinks/{name}.json", log)
        for rel, data in self.target.attachments().items():
            earlier = self.writer.root / rel
            before = (
                earlier.read_bytes() + RESUMED_MARK if earlier.is_file() and not earlier.is_symlink() else b""
            )
            self.writer.write_bytes(rel, before + data)

    def checkpoint(self, record: Trial) -> tuple[str, str]:
        """Write the trial's file; (its bundle-relative path, the sha256 of what was written).

        Its sha256 is announced (`TrialCheckpointed`: the journal records it) after a first write
        and before a rewrite: only the first ``ok`` of a file counts (`Journal.checkpoints`), so a
        process killed between the two leaves a file the journal never named (run again on
        resume) or the file the journal named first — never a second first."""
        rel = f"trials/{record.trial_id}.json"
        data = self.writer.document_bytes(rel, record)
        sha256 = hashlib.sha256(data).hexdigest()
        rewrite = record.trial_id in self.finished
        checkpointed = TrialCheckpointed(self.run_id, record.trial_id, rel, sha256, record.verdict, rewrite)
        if rewrite:
            self.bus.emit(checkpointed)
        self.writer.write_prepared(rel, data)
        if not rewrite:
            self.bus.emit(checkpointed)
        self.finished[record.trial_id] = record
        return rel, sha256

    def finish(self, sockets: dict[str, bool], parameters: dict[str, dict[str, Any]]) -> RunDocument:
        entries: list[RunExperiment] = []
        incidents: list[Incident] = []
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
            rel = f"incidents/{doc.incident_id}.json"
            self.writer.write_document(rel, doc)
            incidents.append(doc)
            entries.append(RunExperiment.of_incident(doc, rel))
            self.bus.emit(
                ExperimentFinished(
                    self.run_id, experiment.name, doc.verdict, len(trials), len(doc.violations)
                )
            )
        run = run_document(
            run_id=self.run_id,
            plan=self.plan,
            status="complete",
            started_at=self.started_at,
            experiments=entries + self._skipped_entries(),
            warnings=run_warnings(self.target.notices, self.target.sinks_of(), list(self.finished.values())),
        )
        self.keep_attachments()
        self.writer.write_document("run.json", run)
        self.writer.write_bytes("reports/junit.xml", junit(run, incidents))
        self.writer.finalize()
        return run


def junit(run: RunDocument, incidents: list[Incident]) -> bytes:
    from acklab.evidence.reports.junit import experiments_junit

    return experiments_junit(run, incidents)


def load_resume(out: Path, run_id: str, target: Target) -> tuple[RunDocument, dict[str, Trial]]:
    bundle = out / run_id
    path = bundle / "run.json"
    if not path.is_file():
        raise SpecError(f"--resume {run_id!r}: no {path}; pass the same --out as the interrupted run")
    try:
        run = RunDocument.read(load_evidence_json(path), what=str(path))
    except (OSError, ValueError, EvidenceError) as exc:
        raise SpecError(f"--resume {run_id!r}: {path} is unreadable: {exc}") from exc
    if run.status == "complete":
        raise SpecError(
            f"--resume {run_id!r}: that run is complete (verdict {run.verdict}); nothing to resume"
        )
    if run.target != target.name:
        raise SpecError(
            f"--resume {run_id!r}: the run's target is {run.target!r}, got --target {target.name!r}; pass the same target"
        )
    recorded = _recorded_checkpoints(out, run_id)
    finished = {}
    for trial_file in sorted((bundle / "trials").glob("*.json")):
        rel = trial_file.relative_to(bundle).as_posix()
        if recorded is not None:
            if rel not in recorded:
                continue  # written, but killed before the journal recorded it: rerun (and overwritten)
            try:
                sha = sha256_file(trial_file)
            except OSError as exc:
                raise IntegrityError(f"--resume {run_id!r}: {trial_file} cannot be read: {exc}") from exc
            first = recorded[rel].first
            if sha != first and sha in {s for _, s in recorded[rel].rewrites}:
                # A rewrite of the end-of-run re-read (the run was killed after it): nothing
                # vouches for a rewrite of a run that never finished, so the trial is run again.
                continue
            if sha != first:
                raise IntegrityError(
                    f"--resume {run_id!r}: {trial_file} is not the trial file the journal recorded when the "
                    f"trial finished (sha256 {sha[:12]}, recorded {first[:12]}): it was changed "
                    "after the trial ended, so the run is not resumed; start a new run"
                )
        try:
            record = Trial.read(load_evidence_json(trial_file), what=str(trial_file))
        except (OSError, ValueError, EvidenceError):
            continue  # a torn or foreign file is not a finished trial; it is rerun
        finished[record.trial_id] = record
    return run, finished


def _recorded_checkpoints(out: Path, run_id: str) -> dict[str, TrialCheckpoints] | None:
    """What the journal recorded of the run's trial files (None: the run kept no journal).

    The chain is checked first: rows forged into the journal do not vouch for a trial file."""
    path = journal_path(out)
    if not path.is_file():
        return None
    with Journal(path, readonly=True) as journal:
        report = journal.verify_chain()
        if not report.ok and report.broken is not None:
            raise IntegrityError(f"--resume {run_id!r}: {path}: {report.broken.describe()}")
        recorded = journal.checkpoints(run_id)
        started = any(e.kind == "run" for e in journal.history(run_id)) if not recorded else True
    return recorded if started else None
