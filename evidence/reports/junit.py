"""JUnit XML from the experiments of a run, in the shape GitLab's test report reads.

One ``<testsuite>`` per target, one ``<testcase>`` per target x experiment
(``classname`` = target, ``name`` = experiment). A failed verdict carries a ``<failure>``
listing every violation; a verdict ``error`` (the lab could not finish) is an ``<error>``,
so that "the handler failed" and "the lab failed" stay apart in the merge request too. An
experiment that does not apply to the target (verdict ``skipped``) is a ``<skipped>`` case
with its reason.
"""

from __future__ import annotations

# We only build XML here, never parse it, so the XML-parsing warning does not apply.
import xml.etree.ElementTree as ET  # nosec B405
from collections.abc import Iterable
from dataclasses import dataclass

from acklab.evidence.documents.incident import Incident
from acklab.evidence.documents.records import Violation, observed_text
from acklab.evidence.documents.run import RunDocument, RunExperiment


@dataclass(frozen=True)
class Case:
    """One target x experiment, as JUnit sees it."""

    target: str
    experiment: str
    verdict: str
    trials: int
    violations: tuple[Violation, ...]
    error: str | None
    seconds: float
    incident: str | None


def _violation_line(violation: Violation) -> str:
    observed = observed_text(violation.observed, violation.source, violation.expected)
    if not isinstance(violation.observed, int):  # a text observed is quoted: it may be the handler's words
        observed = f"observed {violation.observed!r}, expected {violation.expected}"
    line = f"{violation.invariant}: event {violation.event_id} {observed}"
    if violation.trial:
        line += f" (trial {violation.trial})"
    if violation.detail:
        line += f" — {violation.detail}"
    return line


def _case_from_incident(incident: Incident) -> Case:
    errors = [t.error for t in incident.trials if t.error]
    return Case(
        target=incident.target.name,
        experiment=incident.experiment.name,
        verdict=incident.verdict,
        trials=incident.summary.trials,
        violations=tuple(incident.violations),
        error="; ".join(sorted(set(errors))) or None,
        seconds=sum(t.duration_ms for t in incident.trials) / 1000,
        incident=incident.incident_id,
    )


def _case_from_run_entry(target: str, entry: RunExperiment) -> Case:
    return Case(
        target=target,
        experiment=entry.name,
        verdict=entry.verdict,
        trials=entry.trials,
        violations=tuple(entry.violations),
        error=entry.error or entry.reason,
        seconds=0.0,
        incident=entry.incident,
    )


def cases(run: RunDocument, incidents: Iterable[Incident]) -> list[Case]:
    """Every target x experiment: from the incidents, plus run.json entries without one."""
    found = {}
    for incident in incidents:
        case = _case_from_incident(incident)
        found[(case.target, case.experiment)] = case
    covered = {experiment for _, experiment in found}
    for entry in run.experiments:
        if entry.name not in covered:
            case = _case_from_run_entry(run.target, entry)
            found[(case.target, case.experiment)] = case
    return sorted(found.values(), key=lambda c: (c.target, c.experiment))


def _testcase(suite: ET.Element, case: Case) -> None:
    element = ET.SubElement(
        suite,
        "testcase",
        classname=case.target,
        name=case.experiment,
        time=f"{case.seconds:.3f}",
    )
    if case.verdict == "fail":
        count = len(case.violations)
        failure = ET.SubElement(
            element,
            "failure",
            type="InvariantViolated",
            message=f"{count} violation(s) in {case.trials} trial(s) of {case.experiment} against {case.target}",
        )
        failure.text = "\n".join(_violation_line(v) for v in case.violations) or "verdict: fail"
    elif case.verdict == "error":
        error = ET.SubElement(
            element,
            "error",
            type="LabError",
            message=f"the lab could not finish {case.experiment} against {case.target}",
        )
        error.text = case.error or "verdict: error (see the incident and trial records)"
    elif case.verdict == "skipped":
        ET.SubElement(element, "skipped", message=case.error or "does not apply to this target")
    out = [f"trials: {case.trials}", f"verdict: {case.verdict}"]
    if case.incident:
        out.append(f"incident: {case.incident}")
    ET.SubElement(element, "system-out").text = "\n".join(out)


def experiments_junit(run: RunDocument, incidents: list[Incident]) -> bytes:
    """JUnit XML (UTF-8 bytes) for a run: one testsuite per target, one testcase per experiment."""
    all_cases = cases(run, incidents)
    root = ET.Element("testsuites", name=f"acklab {run.run_id}".strip())
    by_target: dict[str, list[Case]] = {}
    for case in all_cases:
        by_target.setdefault(case.target, []).append(case)
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for target, target_cases in sorted(by_target.items()):
        counts = {
            "tests": len(target_cases),
            "failures": sum(c.verdict == "fail" for c in target_cases),
            "errors": sum(c.verdict == "error" for c in target_cases),
            "skipped": sum(c.verdict == "skipped" for c in target_cases),
        }
        suite = ET.SubElement(
            root,
            "testsuite",
            name=target,
            tests=str(counts["tests"]),
            failures=str(counts["failures"]),
            errors=str(counts["errors"]),
            skipped=str(counts["skipped"]),
            time=f"{sum(c.seconds for c in target_cases):.3f}",
        )
        for case in target_cases:
            _testcase(suite, case)
        for key in totals:
            totals[key] += counts[key]
    for key, value in totals.items():
        root.set(key, str(value))
    ET.indent(root)
    data: bytes = ET.tostring(root, encoding="utf-8", xml_declaration=True)
    return data + b"\n"
