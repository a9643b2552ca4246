"""Verify's test check reads pytest's JUnit report, never only its exit code."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from acklab.flows.pytest_report import collected, is_pytest, judge, junit_id, read_report
from acklab.flows.sandbox import choose

TESTS = """
import pytest


def test_plain():
    assert 1 + 1 == 2


@pytest.mark.parametrize("value", ["a b", "x::y", "[z]"])
def test_params(value):
    assert value


class TestGroup:
    def test_method(self):
        assert True
"""
FAILING = "def test_fails():\n    assert 1 == 2\n"
# What a patch can do inside the test process: end it with status 0 once pytest is done.
EXIT_0 = "import atexit\nimport os\n\natexit.register(os._exit, 0)\n"


def project(where: Path, files: dict[str, str]) -> Path:
    for rel, text in {"pyproject.toml": "[tool.pytest.ini_options]\n", **files}.items():
        (where / rel).parent.mkdir(parents=True, exist_ok=True)
        (where / rel).write_text(text)
    return where


def pytest_in(where: Path, report: Path) -> int:
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={report}", "tests"]
    return subprocess.run(argv, cwd=where, capture_output=True, check=False).returncode


def test_the_report_names_every_test_collected_at_the_head(tmp_path):
    head = project(tmp_path / "head", {"tests/sub/test_things.py": TESTS})
    place = choose().prepare(head, label="test-head")
    try:
        expected = collected(place, [sys.executable, "-m", "pytest", "-q", "tests"], 120)
    finally:
        place.close()
    assert len(expected) == 5
    assert "tests/sub/test_things.py::TestGroup::test_method" in expected
    assert pytest_in(head, tmp_path / "junit.xml") == 0
    report = read_report(tmp_path / "junit.xml")
    assert {junit_id(n) for n in expected} == set(report.outcomes)
    assert judge(0, report, expected) == []


def test_exit_0_after_a_failure_does_not_pass(tmp_path):
    patched = project(
        tmp_path / "patched", {"tests/conftest.py": EXIT_0, "tests/test_it.py": TESTS + FAILING}
    )
    code = pytest_in(patched, tmp_path / "junit.xml")
    assert code == 0  # the exit code lies
    reasons = judge(code, read_report(tmp_path / "junit.xml"), [])
    assert reasons == ["1 failure(s) in the report: tests.test_it::test_fails"]


def test_a_test_that_vanished_fails_the_check(tmp_path):
    patched = project(tmp_path / "patched", {"tests/test_it.py": "def test_plain():\n    pass\n"})
    assert pytest_in(patched, tmp_path / "junit.xml") == 0
    expected = ["tests/test_it.py::test_plain", "tests/test_it.py::test_gone"]
    [reason] = judge(0, read_report(tmp_path / "junit.xml"), expected)
    assert reason.startswith("1 of the 2 tests collected at the expected head are not in the report")
    assert "test_gone" in reason


def test_no_report_an_incomplete_one_or_a_dtd_fails_the_check(tmp_path):
    missing = read_report(tmp_path / "none.xml")
    assert judge(0, missing, []) == [
        "pytest wrote no JUnit report (it ended before writing one, or not as a file)"
    ]
    incomplete = tmp_path / "incomplete.xml"
    incomplete.write_text(
        '<testsuites><testsuite tests="3" failures="0" errors="0" skipped="0">'
        '<testcase classname="t" name="a"/></testsuite></testsuites>'
    )
    assert any("incomplete" in r for r in judge(0, read_report(incomplete), []))
    bomb = tmp_path / "dtd.xml"
    bomb.write_text('<!DOCTYPE x [<!ENTITY a "aaaa">]><testsuite tests="0"/>')
    assert any("DTD" in r for r in judge(0, read_report(bomb), []))
    skipped = tmp_path / "skipped.xml"
    skipped.write_text(
        '<testsuite tests="2" failures="0" errors="0" skipped="2">'
        '<testcase classname="t" name="a"><skipped type="pytest.skip" message="no"/></testcase>'
        '<testcase classname="t" name="b"><skipped type="pytest.xfail" message="known"/></testcase>'
        "</testsuite>"
    )
    assert judge(0, read_report(skipped), []) == ["1 skipped(s) in the report: t::a"]


def test_pytest_commands_are_recognised():
    assert is_pytest(["python", "-m", "pytest", "-q"])
    assert is_pytest(["/usr/bin/pytest", "tests"])
    assert not is_pytest(["python", "-m", "ruff", "check"])


def test_a_report_that_is_a_link_is_not_read(tmp_path):
    # The code under test writes the report: a link to one of the lab's files would put that
    # file into the evidence.
    secret = tmp_path / "lab-secret.xml"
    secret.write_text('<testsuite tests="0" failures="0" errors="0" skipped="0"></testsuite>')
    (tmp_path / "report").mkdir()
    (tmp_path / "report" / "junit.xml").symlink_to(secret)
    linked_dir = tmp_path / "linked"
    linked_dir.symlink_to(tmp_path / "report")
    for path in (tmp_path / "report" / "junit.xml", linked_dir / "junit.xml"):
        assert read_report(path).problems == [
            "pytest wrote no JUnit report (it ended before writing one, or not as a file)"
        ]
