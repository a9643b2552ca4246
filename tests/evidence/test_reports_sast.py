import hashlib
import json
import subprocess
import sys
from importlib import resources

import pytest

from acklab.evidence.errors import EvidenceInvalid
from acklab.evidence.reports.codequality import check_file, problems
from acklab.evidence.reports.sast import SCHEMA, bandit_to_sast, convert_file
from acklab.evidence.validate import vendored_problems, vendored_validator

INSECURE = """\
import hashlib
import subprocess


def run(cmd, data):
    subprocess.call(cmd, shell=True)
    hashlib.md5(data)
    return eval(cmd)
"""


@pytest.fixture(scope="module")
def bandit_json(tmp_path_factory):
    root = tmp_path_factory.mktemp("snippet")
    (root / "insecure.py").write_text(INSECURE)
    out = root / "bandit.json"
    proc = subprocess.run(
        [sys.executable, "-m", "bandit", "-q", "-f", "json", "-o", str(out), "-r", str(root / "insecure.py")],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1, proc.stderr  # bandit exits 1 when it finds issues
    return out


def test_vendored_schema_is_the_pinned_copy_and_draft_07():
    data = resources.files("acklab.evidence").joinpath("schemas", "vendor", f"{SCHEMA}.json").read_bytes()
    assert (
        hashlib.sha256(data).hexdigest() == "f3d877b4ecb519775bb268be0544284a09a01d54c29e4fcc6cb8fed3d91ae1bf"
    )
    assert type(vendored_validator(SCHEMA)).__name__ == "Draft7Validator"
    sources = resources.files("acklab.evidence").joinpath("schemas", "vendor", "SOURCES.md").read_text()
    assert f"{SCHEMA}.json" in sources
    assert "MIT" in sources


def test_a_real_bandit_report_converts_to_a_valid_gitlab_sast_report(bandit_json, tmp_path):
    out = tmp_path / "reports" / "gl-sast-report.json"
    convert_file(bandit_json, out)
    report = json.loads(out.read_text())
    assert vendored_problems(SCHEMA, report) == []
    assert report["scan"]["status"] == "success"
    assert report["scan"]["scanner"]["id"] == "bandit"
    assert report["scan"]["type"] == "sast"
    by_test = {v["identifiers"][0]["value"]: v for v in report["vulnerabilities"]}
    assert {"B602", "B324", "B307"} <= set(by_test)
    shell = by_test["B602"]
    assert shell["severity"] == "High"
    assert shell["identifiers"][0]["type"] == "bandit_test_id"
    assert {"type": "cwe", "name": "CWE-78", "value": "78"}.items() <= shell["identifiers"][1].items()
    assert shell["location"]["file"].endswith("insecure.py")
    assert shell["location"]["start_line"] == 6
    assert by_test["B307"]["severity"] == "Medium"
    # the same finding keeps its id, so GitLab can track it across pipelines
    assert bandit_to_sast(json.loads(bandit_json.read_text()))["vulnerabilities"] == report["vulnerabilities"]


def test_a_clean_scan_is_a_valid_empty_report():
    report = bandit_to_sast({"generated_at": "2026-01-02T03:04:05Z", "results": [], "errors": []})
    assert report["vulnerabilities"] == []
    assert report["scan"]["start_time"] == "2026-01-02T03:04:05"


def test_bandit_scan_errors_become_scan_messages():
    report = bandit_to_sast({"results": [], "errors": [{"filename": "x.py", "reason": "syntax error"}]})
    assert report["scan"]["messages"] == [
        {"level": "warn", "value": "bandit could not scan x.py: syntax error"}
    ]


@pytest.mark.parametrize(
    "content", ["not json", "[]", '{"results": "x"}', '{"results": [{"test_id": "B1"}]}']
)
def test_input_that_is_not_bandit_json_is_invalid_input(tmp_path, content):
    path = tmp_path / "b.json"
    path.write_text(content)
    with pytest.raises(EvidenceInvalid) as info:
        convert_file(path, tmp_path / "out.json")
    assert info.value.exit_code == 3
    assert "bandit" in str(info.value)
    assert not (tmp_path / "out.json").exists()


def test_ruff_gitlab_output_passes_the_code_quality_checker(tmp_path):
    (tmp_path / "bad.py").write_text("import os\nimport sys\n")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "ruff",
            "check",
            "--no-cache",
            "--isolated",
            "--select",
            "F",
            "--output-format=gitlab",
            str(tmp_path / "bad.py"),
        ],
        check=False,
        capture_output=True,
        timeout=60,
    )
    out = tmp_path / "codequality.json"
    out.write_bytes(proc.stdout)
    assert check_file(out) == 2


@pytest.mark.parametrize(
    ("doc", "problem"),
    [
        ({}, "expected a JSON array"),
        (
            [
                {
                    "description": "d",
                    "check_name": "c",
                    "fingerprint": "f",
                    "severity": "warning",
                    "location": {"path": "a.py", "lines": {"begin": 1}},
                }
            ],
            "severity",
        ),
        (
            [
                {
                    "description": "d",
                    "check_name": "c",
                    "fingerprint": "f",
                    "severity": "minor",
                    "location": {"path": "a.py"},
                }
            ],
            "lines.begin",
        ),
        (
            [
                {
                    "check_name": "c",
                    "fingerprint": "f",
                    "severity": "minor",
                    "location": {"path": "a.py", "lines": {"begin": 1}},
                }
            ],
            "description",
        ),
    ],
)
def test_code_quality_checker_names_the_problem(doc, problem):
    found = problems(json.dumps(doc).encode())
    assert any(problem in p for p in found), found


def test_code_quality_checker_refuses_a_byte_order_mark():
    assert problems(b"\xef\xbb\xbf[]") == ["(file): starts with a byte-order mark; GitLab rejects it"]
