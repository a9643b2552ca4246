"""bandit's JSON report (``bandit -f json``) converted to GitLab's SAST report format 15.2.1.

GitLab reads ``artifacts:reports:sast`` only when it validates against its schema, so every
report is checked against the vendored copy (`evidence/schemas/vendor/`) before it is
written. Mapping: bandit's severity LOW/MEDIUM/HIGH becomes Low/Medium/High (UNDEFINED
becomes Unknown); the primary identifier is bandit's test id (B602 ...), followed by the CWE
when bandit names one; the vulnerability id is a UUID derived from test id, file, line and
text, so the same finding keeps its id across pipelines.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from acklab.evidence.bundle import acklab_version, atomic_write, dump_json
from acklab.evidence.errors import EvidenceInvalid
from acklab.evidence.loading import EVIDENCE, DocumentError, load_json
from acklab.evidence.validate import validate_vendored

SCHEMA = "gitlab-sast-report-format-15.2.1"
SCHEMA_VERSION = "15.2.1"
SEVERITY = {"LOW": "Low", "MEDIUM": "Medium", "HIGH": "High", "UNDEFINED": "Unknown"}
_NAMESPACE = uuid.UUID("5d3f1c8e-8f7e-4b7a-9a51-2f4bd2a6a0c1")  # acklab's, fixed forever
_TIME_FORMAT = "%Y-%m-%dT%H:%M:%S"


def _scan_time(value: str | None) -> str:
    """bandit's `generated_at` (ISO 8601) as GitLab's yyyy-mm-ddThh:mm:ss in UTC."""
    if not value:
        return datetime.now(UTC).strftime(_TIME_FORMAT)
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError as exc:
        raise EvidenceInvalid(
            f"bandit report: generated_at {value!r} is not an ISO 8601 time; "
            "expected the file `bandit -f json` writes"
        ) from exc
    if moment.tzinfo is not None:
        moment = moment.astimezone(UTC)
    return moment.strftime(_TIME_FORMAT)


def _bandit_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("bandit")
    except PackageNotFoundError:
        return "unknown"


def _identifiers(result: Mapping[str, Any]) -> list[dict[str, str]]:
    test_id = str(result["test_id"])
    primary = {
        "type": "bandit_test_id",
        "name": f"Bandit Test ID {test_id}",
        "value": test_id,
    }
    if str(result.get("more_info", "")).startswith(("http://", "https://")):
        primary["url"] = str(result["more_info"])
    found = [primary]
    cwe = result.get("issue_cwe") or {}
    if cwe.get("id"):
        entry = {"type": "cwe", "name": f"CWE-{cwe['id']}", "value": str(cwe["id"])}
        if str(cwe.get("link", "")).startswith(("http://", "https://")):
            entry["url"] = str(cwe["link"])
        found.append(entry)
    return found


def _vulnerability(result: Mapping[str, Any]) -> dict[str, Any]:
    lines = [int(n) for n in result.get("line_range") or [result["line_number"]]]
    text = str(result["issue_text"])
    key = f"{result['test_id']}:{result['filename']}:{result['line_number']}:{text}"
    description = (
        f"{text}\n\nbandit {result['test_id']} ({result.get('test_name', '')}), "
        f"confidence {str(result.get('issue_confidence', 'UNDEFINED')).lower()}."
    )
    return {
        "id": str(uuid.uuid5(_NAMESPACE, key)),
        "name": text[:255],
        "description": description,
        "severity": SEVERITY.get(str(result.get("issue_severity", "UNDEFINED")).upper(), "Unknown"),
        "identifiers": _identifiers(result),
        "location": {
            "file": str(result["filename"]),
            "start_line": min(lines),
            "end_line": max(lines),
        },
    }


def bandit_to_sast(bandit: Mapping[str, Any], *, scanner_version: str | None = None) -> dict[str, Any]:
    """Convert a parsed bandit JSON report to a GitLab SAST report (validated; raises EvidenceInvalid)."""
    if not isinstance(bandit, Mapping) or not isinstance(bandit.get("results"), list):
        raise EvidenceInvalid(
            "not a bandit JSON report: expected an object with a 'results' list; "
            "produce it with `bandit -f json -o FILE -r PATH`"
        )
    try:
        vulnerabilities = [_vulnerability(r) for r in bandit["results"]]
    except (KeyError, TypeError, ValueError) as exc:
        raise EvidenceInvalid(
            f"bandit report: a result lacks a field ({exc!r}); expected bandit's JSON"
        ) from exc
    when = _scan_time(bandit.get("generated_at"))
    version = scanner_version or _bandit_version()
    scan: dict[str, Any] = {
        "analyzer": {
            "id": "acklab-bandit",
            "name": "acklab evidence sast (bandit)",
            "version": acklab_version(),
            "vendor": {"name": "acklab"},
        },
        "scanner": {
            "id": "bandit",
            "name": "bandit",
            "version": version,
            "vendor": {"name": "PyCQA"},
            "url": "https://github.com/PyCQA/bandit",
        },
        "type": "sast",
        "start_time": when,
        "end_time": when,
        "status": "success",
    }
    messages = [
        {"level": "warn", "value": f"bandit could not scan {e.get('filename', '?')}: {e.get('reason', '?')}"}
        for e in bandit.get("errors") or []
    ]
    if messages:
        scan["messages"] = messages
    report = {"version": SCHEMA_VERSION, "scan": scan, "vulnerabilities": vulnerabilities}
    validate_vendored(SCHEMA, report, what="SAST report")
    return report


def convert_file(bandit_json: Path, out: Path, *, scanner_version: str | None = None) -> dict[str, Any]:
    """Read bandit's JSON file, convert it, write the SAST report atomically; return the report."""
    try:
        bandit = load_json(Path(bandit_json), limits=EVIDENCE)
    except DocumentError as exc:
        raise EvidenceInvalid(f"{exc}; produce it with `bandit -f json -o FILE -r PATH`") from exc
    report = bandit_to_sast(bandit, scanner_version=scanner_version)
    atomic_write(Path(out), dump_json(report))
    return report
