"""What a run returns to Python callers: a read-only view of its run document (``run.json``).

`RunResult` is frozen: the run document as the bundle holds it (`document`, read with its model,
`acklab.evidence.documents.run.RunDocument`; `run` is its JSON), plus the bundle's path;
every property is computed from that document, never from state the run kept elsewhere,
so a result rebuilt from a bundle on disk (`RunResult.load`) says the same as the one the
run returned. `ExperimentResult` and `Violation` are typed views of the document's
``experiments`` entries and their ``violations``.

`RunResult.explain` is the text an assertion shows (``assert result.passed,
result.explain()``): for each experiment its verdict, for each violated invariant the
event, what was observed against what was expected, the delivery that caused it and the
incident file; skipped experiments with their reason; errors with theirs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from acklab.evidence.documents.records import Violation as ViolationRecord
from acklab.evidence.documents.records import observed_text
from acklab.evidence.documents.result import RunResultJson
from acklab.evidence.documents.run import RunDocument, RunExperiment
from acklab.evidence.exitcodes import ExitCode
from acklab.evidence.loading import load_evidence_json

# What explain() shows of one experiment before it counts the rest (a failing handler may
# violate an invariant on every event of every trial).
SHOWN_PER_INVARIANT = 1
DETAIL_CHARS = 600
REASON_CHARS = 800
# How the first line of explain() states a run's verdict.
HEADLINES = (("pass", "PASSED"), ("fail", "FAILED"), ("error", "COULD NOT BE JUDGED"))


def _cut(text: str, limit: int) -> str:
    # Control characters from a handler's answer or an exception must not reformat the text
    # an assertion prints; the rest is shown as it was recorded.
    cleaned = "".join(c if c.isprintable() or c == " " else repr(c)[1:-1] for c in text)
    return cleaned if len(cleaned) <= limit else cleaned[: limit - 1] + "…"


@dataclass(frozen=True)
class Violation:
    """One broken invariant: which event, what was observed against what was expected, and why."""

    experiment: str
    invariant: str
    event_id: str
    observed: Any
    expected: str
    detail: str
    trial: str | None = None
    # The delivery that caused it: {"seq", "kind", "attempt"} (None when no single one did).
    delivery: Mapping[str, Any] | None = None
    source: str | None = None  # at-most-once-effect: rows, emails or calls

    @classmethod
    def of(cls, experiment: str, record: ViolationRecord) -> Violation:
        return cls(
            experiment=experiment,
            invariant=record.invariant,
            event_id=record.event_id,
            observed=record.observed,
            expected=record.expected,
            detail=record.detail,
            trial=record.trial,
            delivery=record.delivery.dump() if record.delivery is not None else None,
            source=record.source,
        )

    @classmethod
    def from_doc(cls, experiment: str, doc: Mapping[str, Any]) -> Violation:
        """A violation as run.json holds it (read with its model: EvidenceInvalid when it is not one)."""
        return cls.of(experiment, ViolationRecord.read(doc))

    def describe(self) -> str:
        """One line: invariant, event, observed vs expected (and which effects: rows, emails, calls)."""
        return f"{self.invariant} on event {self.event_id}: {observed_text(self.observed, self.source, self.expected)}"


@dataclass(frozen=True)
class ExperimentResult:
    """One experiment of a run: its verdict (``pass``, ``fail``, ``error`` or ``skipped``) and why."""

    name: str
    verdict: str
    trials: int
    fault_landed: int
    violations: tuple[Violation, ...]
    reason: str | None
    # Absolute path of the experiment's incident file (None when it has none: skipped).
    incident: Path | None
    skipped_variants: Mapping[str, str]

    @classmethod
    def of(cls, entry: RunExperiment, bundle: Path) -> ExperimentResult:
        return cls(
            name=entry.name,
            verdict=entry.verdict,
            trials=entry.trials,
            fault_landed=entry.fault_landed or 0,
            violations=tuple(Violation.of(entry.name, v) for v in entry.violations),
            reason=entry.reason or entry.error,
            incident=(bundle / entry.incident).resolve() if entry.incident else None,
            skipped_variants=dict(entry.skipped_variants or {}),
        )

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any], bundle: Path) -> ExperimentResult:
        """An experiment as run.json holds it (read with its model: EvidenceInvalid when it is not one)."""
        return cls.of(RunExperiment.read(doc), bundle)

    @property
    def passed(self) -> bool:
        return self.verdict == "pass"

    @property
    def skipped(self) -> bool:
        return self.verdict == "skipped"

    def explain(self) -> str:
        """The experiment's lines of `RunResult.explain`."""
        if self.skipped:
            return (
                f"{self.name}: skipped — {_cut(self.reason or 'does not apply to this target', REASON_CHARS)}"
            )
        landed = f"the fault landed in {self.fault_landed} of {self.trials} trial(s)"
        if self.verdict == "pass":
            lines = [f"{self.name}: pass — {landed}"]
        elif self.verdict == "error":
            lines = [
                f"{self.name}: error (not judged: the lab, not the handler, failed) — {landed}",
                f"  why: {_cut(self.reason or 'unknown', REASON_CHARS)}",
            ]
        else:
            lines = [f"{self.name}: FAIL — {len(self.violations)} violation(s); {landed}"]
            by_invariant: dict[str, list[Violation]] = {}
            for violation in self.violations:
                by_invariant.setdefault(violation.invariant, []).append(violation)
            for found in by_invariant.values():
                for violation in found[:SHOWN_PER_INVARIANT]:
                    lines.append(f"  {violation.describe()}")
                    lines.append(f"    {_cut(violation.detail, DETAIL_CHARS)}")
                if len(found) > SHOWN_PER_INVARIANT:
                    lines.append(f"    (and {len(found) - SHOWN_PER_INVARIANT} more of {found[0].invariant})")
            if self.reason:
                lines.append(f"  also: {_cut(self.reason, REASON_CHARS)}")
        lines += [f"  {variant} skipped: {why}" for variant, why in self.skipped_variants.items()]
        if self.incident is not None and self.verdict != "pass":
            lines.append(f"  incident: {self.incident}")
        return "\n".join(lines)


@dataclass(frozen=True)
class RunResult:
    """The outcome of a run: its run document (``run.json``), its bundle, the exit code of the contract.

    ``passed`` is true only when every experiment that ran passed (a skipped one counts for
    nothing; a run where nothing could be judged did not pass). ``explain()`` is the text
    to show when it did not. Frozen: `but` makes a copy with another `rerun`.
    """

    document: RunDocument
    bundle: Path
    # How to run exactly this again (the pytest plugin: the test's id and --acklab-seed), shown by explain().
    rerun: str | None = None

    @classmethod
    def of(cls, document: RunDocument, bundle: Path, rerun: str | None = None) -> RunResult:
        """The result of a run whose document is `document` and whose bundle is at `bundle`."""
        return cls(document, Path(bundle), rerun)

    def but(self, *, rerun: str | None) -> RunResult:
        """This result, saying how to run it again (`rerun`)."""
        return replace(self, rerun=rerun)

    @property
    def run(self) -> dict[str, Any]:
        """The run document as JSON (``run.json``), a fresh copy."""
        return self.document.dump()

    @classmethod
    def load(cls, bundle: Path) -> RunResult:
        """The result of the run whose bundle is `bundle` (its ``run.json``, read bounded and with
        its model: EvidenceInvalid when it is not a run document)."""
        path = Path(bundle) / "run.json"
        return cls.of(RunDocument.read(load_evidence_json(path), what=str(path)), Path(bundle))

    @property
    def run_id(self) -> str:
        return self.document.run_id

    @property
    def target(self) -> str:
        return self.document.target

    @property
    def verdict(self) -> str:
        """``pass``, ``fail`` (an invariant was violated) or ``error`` (the lab could not judge)."""
        return self.document.verdict

    @property
    def passed(self) -> bool:
        return self.verdict == "pass"

    @property
    def exit_code(self) -> ExitCode:
        return {"pass": ExitCode.OK, "fail": ExitCode.VERDICT_FAILED}.get(self.verdict, ExitCode.LAB_ERROR)

    @property
    def experiments(self) -> tuple[ExperimentResult, ...]:
        """Every experiment of the run in the order it ran, skipped ones last."""
        return tuple(ExperimentResult.of(e, self.bundle) for e in self.document.experiments)

    def experiment(self, name: str) -> ExperimentResult:
        """The experiment called `name` (KeyError naming those the run has, when it has none)."""
        for found in self.experiments:
            if found.name == name:
                return found
        have = ", ".join(e.name for e in self.experiments) or "none"
        raise KeyError(f"no experiment {name!r} in run {self.run_id}; it has: {have}")

    @property
    def violations(self) -> tuple[Violation, ...]:
        """Every violation of every experiment."""
        return tuple(v for e in self.experiments for v in e.violations)

    @property
    def seed(self) -> int:
        return self.document.seed

    @property
    def warnings(self) -> tuple[str, ...]:
        """What the run saw that may make a pass mean less than it says (`harness.engine.notices`)."""
        return tuple(self.document.warnings or ())

    def result_json(self) -> RunResultJson:
        """The ``acklab run --json`` object as its model (paths absolute)."""
        return RunResultJson.of(self.document, str(self.bundle.resolve()))

    def as_json(self) -> dict[str, Any]:
        """Exactly the ``acklab run --json`` object (paths absolute)."""
        return self.result_json().dump()

    def explain(self) -> str:
        """What happened, for a person: the verdict, each experiment, each violation, where the evidence is."""
        experiments = self.experiments
        judged = [e for e in experiments if not e.skipped]
        failed = [e for e in judged if e.verdict == "fail"]
        erred = [e for e in judged if e.verdict == "error"]
        counts = [f"{len(failed)} of {len(judged)} experiment(s) failed"]
        if erred:
            counts.append(f"{len(erred)} could not be judged")
        if len(judged) != len(experiments):
            counts.append(f"{len(experiments) - len(judged)} skipped")
        head = (
            f"acklab: {self.target} {dict(HEADLINES).get(self.verdict, self.verdict)} "
            f"(exit {int(self.exit_code)}): {', '.join(counts)}; seed {self.seed}"
        )
        # Failures first: they are what the reader came for.
        order = sorted(experiments, key=lambda e: ("fail", "error", "pass", "skipped").index(e.verdict))
        body = [e.explain() for e in order]
        body += [f"warning: {_cut(w, REASON_CHARS)}" for w in self.warnings]
        tail = (
            f"evidence: {self.bundle.resolve()} (acklab evidence verify {self.bundle.resolve()}; "
            f"acklab console --evidence {self.bundle.resolve().parent})"
        )
        again = [f"reproduce: {self.rerun}"] if self.rerun and not self.passed else []
        return "\n".join([head, *body, tail, *again])

    def __repr__(self) -> str:
        return f"<RunResult {self.run_id} {self.target}: {self.verdict}>"
