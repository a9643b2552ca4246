"""Counting what a bundle's reports say: JUnit tests, Code Quality issues, SAST findings.

Reports are recognised by content, not by name, because pipelines name them freely:
XML with <testsuite>/<testsuites> is JUnit, a JSON array is Code Quality, a JSON object with
`vulnerabilities` is a GitLab security report (its `scan.type` says which).
"""

from __future__ import annotations

import re

# Parsing only local evidence files, and any DTD is refused before parsing (see _junit),
# which removes the entity-expansion attacks the bandit warning is about.
import xml.etree.ElementTree as ET  # nosec B405
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from acklab.evidence.loading import DocumentError, Limits, parse_json, read_bounded

MAX_REPORT_BYTES = 32 * 1024 * 1024
REPORT_LIMITS = Limits(max_bytes=MAX_REPORT_BYTES)
_DTD = re.compile(rb"<!(DOCTYPE|ENTITY)", re.IGNORECASE)


@dataclass(frozen=True)
class Suite:
    """One JUnit testsuite's counts."""

    name: str
    tests: int
    failures: int
    errors: int
    skipped: int


@dataclass
class Report:
    """One file under reports/, with what could be counted from it."""

    rel: str
    size: int
    kind: str = "file"
    suites: list[Suite] = field(default_factory=list)
    severities: dict[str, int] = field(default_factory=dict)
    problem: str | None = None

    @property
    def tests(self) -> int:
        return sum(s.tests for s in self.suites)

    @property
    def failures(self) -> int:
        return sum(s.failures for s in self.suites)

    @property
    def errors(self) -> int:
        return sum(s.errors for s in self.suites)

    @property
    def skipped(self) -> int:
        return sum(s.skipped for s in self.suites)

    @property
    def findings(self) -> int:
        return sum(self.severities.values())


def _suite(element: ET.Element) -> Suite:
    cases = element.findall(".//testcase")
    return Suite(
        name=element.get("name", "(unnamed)"),
        tests=len(cases),
        failures=sum(c.find("failure") is not None for c in cases),
        errors=sum(c.find("error") is not None for c in cases),
        skipped=sum(c.find("skipped") is not None for c in cases),
    )


def _junit(report: Report, data: bytes) -> None:
    report.kind = "JUnit"
    if _DTD.search(data):
        report.problem = "refused: the XML declares a DTD or entities"
        return
    try:
        # DTDs and entities were refused above, so no expansion attack reaches the parser.
        root = ET.fromstring(data)  # noqa: S314  # nosec B314
    except ET.ParseError as exc:
        report.problem = f"not well-formed XML: {exc}"
        return
    suites = [root] if root.tag == "testsuite" else root.findall(".//testsuite")
    report.suites = [_suite(s) for s in suites]


def _severity_counts(items: list[Any]) -> dict[str, int]:
    counts = Counter(
        str(i.get("severity", "unknown")).lower() if isinstance(i, dict) else "unknown" for i in items
    )
    return dict(sorted(counts.items()))


def _json(report: Report, data: bytes) -> None:
    try:
        doc = parse_json(data, source=report.rel, limits=REPORT_LIMITS)
    except DocumentError as exc:
        report.kind = "json"
        report.problem = exc.problem
        return
    if isinstance(doc, list):
        report.kind = "code quality"
        report.severities = _severity_counts(doc)
    elif isinstance(doc, dict) and isinstance(doc.get("vulnerabilities"), list):
        scan = doc["scan"] if isinstance(doc.get("scan"), dict) else {}
        report.kind = str(scan.get("type") or "security").replace("_", " ")
        if report.kind == "sast":
            report.kind = "SAST"
        report.severities = _severity_counts(doc["vulnerabilities"])
    else:
        report.kind = "json"


def read_report(bundle: Path, rel: str) -> Report:
    """Classify and count one report file; problems are recorded, never raised."""
    path = bundle / rel
    try:
        size = path.lstat().st_size
    except OSError as exc:
        return Report(rel, 0, problem=f"missing: {exc.strerror}")
    report = Report(rel, size)
    if size > MAX_REPORT_BYTES:
        report.problem = f"too large to count ({size} bytes)"
        return report
    try:
        data = read_bounded(path, REPORT_LIMITS, follow_symlinks=False, what=rel)
    except DocumentError as exc:
        report.problem = exc.problem
        return report
    head = data.lstrip()[:200]
    if rel.endswith(".xml") or head.startswith(b"<"):
        _junit(report, data)
    elif rel.endswith(".json") or head[:1] in (b"[", b"{"):
        _json(report, data)
    return report


def read_reports(bundle: Path, rels: list[str]) -> list[Report]:
    """Every report of a bundle, classified and counted."""
    return [read_report(bundle, rel) for rel in rels]
