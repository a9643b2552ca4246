"""Verify's test check: pytest's result read from its JUnit report, against the tests at the head.

pytest runs in the patched worktree, so a patch runs code inside the test process: it can
register ``atexit.register(os._exit, 0)`` and turn "1 failed" into exit 0. The check
therefore passes only when, together:

* pytest exited 0;
* the JUnit report it wrote to a fresh directory outside the worktree exists, is complete
  (parses; every suite's counts match its test cases) and holds no failure, no error and no
  skip (an ``xfail`` excepted);
* every test collected at the expected head (`collected`, run on the head's worktree, never
  on the patched one) is in the report and passed: none may vanish.

What this still cannot prove, and why the lab's verdict decides, is said in flows/README.md.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import stat
import subprocess  # nosec B404

# Bounded size, no DTD (read_report): the standard parser is safe on what it is given.
import xml.etree.ElementTree as ET  # nosec B405
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from acklab.harness.procs.confinement import Confined, Launch

from .errors import FlowError
from .escape import one_line

MAX_REPORT_BYTES = 32 * 1024 * 1024
_DTD = re.compile(rb"<!(DOCTYPE|ENTITY)", re.IGNORECASE)
PLUGIN = "acklab_collected_tests"
# Written beside the report, imported by pytest at the head: the node ids it collected.
PLUGIN_SOURCE = """import json, os


def pytest_collection_finish(session):
    with open(os.environ["ACKLAB_COLLECTED"], "w", encoding="utf-8") as out:
        json.dump([item.nodeid for item in session.items], out)
"""


def is_pytest(argv: Sequence[str]) -> bool:
    """Whether a verify command runs pytest (``python -m pytest ...`` or ``pytest ...``)."""
    if not argv:
        return False
    if Path(argv[0]).name in ("pytest", "py.test"):
        return True
    return any(a == "-m" and b == "pytest" for a, b in itertools.pairwise(argv))


def junit_id(nodeid: str) -> tuple[str, str]:
    """pytest's JUnit (classname, name) of a node id, the way its junitxml plugin mangles it."""
    path, bracket, params = nodeid.partition("[")
    names = path.split("::")
    names[0] = re.sub(r"\.py$", "", names[0].replace("/", "."))
    names[-1] += bracket + params
    return ".".join(names[:-1]), names[-1]


@dataclass(frozen=True)
class Report:
    """What a JUnit report says: every test case and how it ended."""

    outcomes: dict[tuple[str, str], str] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    def count(self, outcome: str) -> int:
        return sum(1 for o in self.outcomes.values() if o == outcome)


def read_written(path: Path, limit: int = MAX_REPORT_BYTES) -> bytes:
    """A file the code under test wrote, read as a regular file at exactly `path`: never through a
    link (a report that points at the lab's own files would be copied into the evidence), at most
    `limit` bytes (OSError otherwise)."""
    if os.path.realpath(path) != str(path):
        raise OSError(f"{path} is reached through a symbolic link")
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as fh:
        info = os.fstat(fh.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise OSError(f"{path} is not a regular file")
        if info.st_size > limit:
            raise OSError(f"{path} is {info.st_size} bytes, over {limit}")
        return fh.read(limit + 1)[:limit]


def read_report(path: Path) -> Report:
    """Parse the report at `path` (bounded, no DTD, never through a link); its problems when it is
    missing or incomplete."""
    try:
        size = path.lstat().st_size
        if size > MAX_REPORT_BYTES:
            return Report(problems=[f"the JUnit report is {size} bytes, over {MAX_REPORT_BYTES}"])
        data = read_written(path)
    except OSError:
        return Report(
            problems=["pytest wrote no JUnit report (it ended before writing one, or not as a file)"]
        )
    if _DTD.search(data):
        return Report(problems=["the JUnit report declares a DTD or entities; refused"])
    try:
        root = ET.fromstring(data)  # noqa: S314  # nosec B314
    except ET.ParseError as exc:
        return Report(problems=[f"the JUnit report does not parse: {exc}"])
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
    if root.tag not in ("testsuite", "testsuites") or not suites:
        return Report(
            problems=[f"the JUnit report has no test suite (root <{one_line(root.tag, limit=40)}>)"]
        )
    outcomes: dict[tuple[str, str], str] = {}
    problems: list[str] = []
    for suite in suites:
        cases = suite.findall("testcase")
        counted = {k: _int(suite.get(k)) for k in ("tests", "failures", "errors", "skipped")}
        found = {"tests": len(cases), "failures": 0, "errors": 0, "skipped": 0}
        for case in cases:
            outcome = _outcome(case)
            if outcome in ("failure", "error"):
                found[f"{outcome}s"] += 1
            elif outcome in ("skipped", "xfail"):
                found["skipped"] += 1
            outcomes[(case.get("classname", ""), case.get("name", ""))] = outcome
        if counted != found:
            problems.append(f"the JUnit report is incomplete: the suite counts {counted}, its cases {found}")
    return Report(outcomes, problems)


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def _outcome(case: ET.Element) -> str:
    for tag in ("failure", "error"):
        if case.find(tag) is not None:
            return tag
    skipped = case.find("skipped")
    if skipped is not None:
        return "xfail" if skipped.get("type") == "pytest.xfail" else "skipped"
    return "passed"


def judge(exit_code: int, report: Report, expected: list[str]) -> list[str]:
    """Why the test check fails (empty: it passes)."""
    reasons = [f"pytest exited {exit_code}"] if exit_code != 0 else []
    reasons += report.problems
    for outcome in ("failure", "error", "skipped"):
        if report.count(outcome):
            names = [f"{c}::{n}" for (c, n), o in report.outcomes.items() if o == outcome]
            reasons.append(
                f"{report.count(outcome)} {outcome}(s) in the report: {one_line(', '.join(names[:5]))}"
            )
    missing = [nodeid for nodeid in expected if junit_id(nodeid) not in report.outcomes]
    if missing:
        reasons.append(
            f"{len(missing)} of the {len(expected)} tests collected at the expected head are not in "
            f"the report: {one_line(', '.join(missing[:5]))}"
        )
    return reasons


def collected(head: Confined, argv: Sequence[str], timeout_s: float) -> list[str]:
    """The node ids `argv` collects in the sandboxed copy `head` of the expected head (FlowError when it
    cannot collect)."""
    plugins = head.scratch / "plugins"
    plugins.mkdir(exist_ok=True)
    (plugins / f"{PLUGIN}.py").write_text(PLUGIN_SOURCE, encoding="utf-8")
    out = head.scratch / "collected.json"
    own = {"ACKLAB_COLLECTED": str(out), "PYTHONPATH": os.pathsep.join([str(plugins), str(head.root)])}
    launch = head.launch(Launch((*argv, "--collect-only", "-p", PLUGIN), own, head.root), network="loopback")
    try:
        # Our interpreter and the spec's argv, never a shell.
        done = subprocess.run(  # nosec B603
            list(launch.argv),
            cwd=launch.cwd,
            env=dict(launch.env),
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise FlowError(f"collecting the tests at the expected head took over {timeout_s}s") from exc
    try:
        nodeids = json.loads(read_written(out).decode("utf-8"))
    except (OSError, ValueError) as exc:
        raise FlowError(
            f"cannot collect the tests at the expected head (pytest exit {done.returncode}): "
            f"{(done.stdout + done.stderr).strip()[-500:]}"
        ) from exc
    if done.returncode not in (0, 5) or not isinstance(nodeids, list):
        raise FlowError(
            f"collecting the tests at the expected head failed (pytest exit {done.returncode}): "
            f"{(done.stdout + done.stderr).strip()[-500:]}"
        )
    return [str(n) for n in nodeids]
