"""A checker of GitLab's Code Quality report (``artifacts:reports:codequality``).

ruff writes the report itself: ``ruff check --output-format=gitlab . > reports/codequality.json``.
GitLab publishes no JSON Schema for this format, only a table (gitlabhq
``doc/ci/testing/code_quality.md``, "Code Quality report format"): a JSON array of objects
with ``description``, ``check_name``, ``fingerprint``, ``severity`` (info, minor, major,
critical, blocker) and ``location.path`` plus ``location.lines.begin`` or
``location.positions.begin.line``, in a file without a byte-order mark. This module checks
exactly those documented fields, so a pipeline can fail early instead of GitLab silently
ignoring the report.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from acklab.evidence.errors import EvidenceInvalid

SEVERITIES = ("info", "minor", "major", "critical", "blocker")
_BOM = b"\xef\xbb\xbf"


def _is_line(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _issue_problems(n: int, issue: Any) -> list[str]:
    if not isinstance(issue, dict):
        return [f"[{n}]: expected an object, got {type(issue).__name__}"]
    found = [
        f"[{n}].{key}: expected a non-empty string, got {issue.get(key)!r}"
        for key in ("description", "check_name", "fingerprint")
        if not (isinstance(issue.get(key), str) and issue[key])
    ]
    if issue.get("severity") not in SEVERITIES:
        found.append(
            f"[{n}].severity: got {issue.get('severity')!r}; expected one of {', '.join(SEVERITIES)}"
        )
    location = issue.get("location")
    if not isinstance(location, dict):
        return [*found, f"[{n}].location: expected an object with path and lines.begin"]
    if not (isinstance(location.get("path"), str) and location["path"]):
        found.append(f"[{n}].location.path: expected a relative file path, got {location.get('path')!r}")
    lines = _object(location.get("lines"))
    begin = _object(_object(location.get("positions")).get("begin"))
    if not (_is_line(lines.get("begin")) or _is_line(begin.get("line"))):
        found.append(f"[{n}].location: expected lines.begin or positions.begin.line (an integer >= 1)")
    return found


def problems(data: bytes) -> list[str]:
    """Every way `data` (a report file's bytes) departs from GitLab's documented format."""
    if data.startswith(_BOM):
        return ["(file): starts with a byte-order mark; GitLab rejects it"]
    try:
        report = json.loads(data)
    except ValueError as exc:
        return [f"(file): not JSON: {exc}"]
    if not isinstance(report, list):
        return [f"(document): expected a JSON array of issues, got {type(report).__name__}"]
    found = [p for n, issue in enumerate(report) for p in _issue_problems(n, issue)]
    fingerprints = [i.get("fingerprint") for i in report if isinstance(i, dict)]
    duplicates = sorted({str(f) for f in fingerprints if fingerprints.count(f) > 1})
    found += [f"fingerprint {f!r} appears more than once" for f in duplicates]
    return found


def check_file(path: Path) -> int:
    """Raise EvidenceInvalid listing every problem of the report at `path`; return its issue count."""
    data = Path(path).read_bytes()
    found = problems(data)
    if found:
        raise EvidenceInvalid(
            f"{path} is not a valid GitLab Code Quality report: {found[0]}"
            + (f" (and {len(found) - 1} more)" if len(found) > 1 else ""),
            problems=found,
        )
    return len(json.loads(data))
