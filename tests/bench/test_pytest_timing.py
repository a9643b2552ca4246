"""bench/pytest_timing.py records whole sessions only — the suite, or the unit tier — with their
test counts per tier; the counts in docs/performance.md (bench/test_timing.py) are read from that record."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import test_timing
from bench.readme import slowest_table
from bench.test_files import program_of
from bench.test_timing import UNIT_BUDGET_S, unit_figure
from tests.tiers import MARKERS

# The sample session has one unit test, one postgres test and one slow one; every other tier is empty.
TIERS = {"unit": 1, **dict.fromkeys(MARKERS, 0), "postgres": 1, "slow": 1}

ROOT = Path(__file__).resolve().parents[2]

SUITE = """
import pytest


def test_plain():
    pass


@pytest.mark.slow
def test_slow():
    pass


def test_with_postgres(pg_url):
    pass
"""


@pytest.fixture
def session(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.Pytester:
    """A suite of three tests (one unit, one slow, one postgres) with the plugin and the tiers."""
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    monkeypatch.setenv("ACKLAB_TEST_TIMING", str(tmp_path / "timing.json"))
    monkeypatch.delenv("ACKLAB_UNIT_HIDING", raising=False)
    pytester.makeini("[pytest]\ntestpaths = suite\n")
    pytester.mkdir("suite")
    (pytester.path / "suite" / "conftest.py").write_text(
        'import pytest\n\npytest_plugins = ("tests.tiers",)\n\n\n@pytest.fixture\ndef pg_url():\n    return "x"\n'
    )
    (pytester.path / "suite" / "test_suite.py").write_text(SUITE)
    return pytester


def recorded(tmp_path: Path) -> dict:
    path = tmp_path / "timing.json"
    return json.loads(path.read_text()) if path.exists() else {}


def run(session: pytest.Pytester, *args: str) -> None:
    # The session loads none of the installed plugins it does not use (schemathesis, hypothesis,
    # acklab's own: 1.2 of its 1.4 s to start, in each of a session's processes); a session on
    # workers names xdist, which names itself to each worker it starts.
    plugins = ["-p", "xdist"] if "-n" in args else []
    with pytest.MonkeyPatch.context() as env:
        env.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
        result = session.runpytest_subprocess(
            *plugins, "-p", "bench.pytest_timing", "-p", "no:cacheprovider", *args
        )
    assert result.ret == 0, result.stdout.str()


def test_the_whole_suite_is_recorded_with_its_tiers(session: pytest.Pytester, tmp_path: Path) -> None:
    run(session)
    entry = recorded(tmp_path)["pytest"]
    assert entry["tests"] == 3
    assert entry["outcomes"] == {"passed": 3}
    assert entry["tiers"] == TIERS
    assert "unit" not in recorded(tmp_path)


def test_the_unit_tier_is_recorded_apart(session: pytest.Pytester, tmp_path: Path) -> None:
    run(session, "--tier=unit")
    entry = recorded(tmp_path)["unit"]
    assert (entry["tests"], entry["outcomes"], entry["hidden"]) == (1, {"passed": 1}, False)
    assert "pytest" not in recorded(tmp_path)
    assert entry["wall_s"] >= 0


@pytest.mark.parametrize(
    "args", [("-k", "plain"), ("-m", "not slow"), ("suite/test_suite.py",), ("--tier=unit", "-k", "plain")]
)
def test_a_part_of_a_session_writes_nothing(
    session: pytest.Pytester, tmp_path: Path, args: tuple[str, ...]
) -> None:
    run(session, *args)
    assert recorded(tmp_path) == {}


UNIT_RUN = {"wall_s": 51.5, "exit_status": 0, "tests": 850, "outcomes": {"passed": 850}, "cpus": 2}


def test_the_unit_figure_carries_its_counts_and_whether_the_dependencies_were_hidden() -> None:
    figure = unit_figure({"unit": {**UNIT_RUN, "at": "2026-12-01T18:00:00Z", "hidden": True}})
    assert (figure.value, figure.unit, figure.met) == (51.5, "s", True)
    assert figure.target == f"<= {UNIT_BUDGET_S:.0f} s"
    assert "850 tests (850 passed)" in (figure.note or "")
    assert "gitlab-ci-local hidden" in (figure.note or "")
    slow = unit_figure({"unit": {**UNIT_RUN, "wall_s": 120.0, "at": "x", "hidden": False}})
    assert slow.met is False
    assert "not hidden" in (slow.note or "")
    interrupted = unit_figure({"unit": {**UNIT_RUN, "exit_status": 2, "at": "x", "hidden": True}})
    assert interrupted.met is None
    assert unit_figure({}).value is None


SPAWNING = """
import subprocess
import sys

import pytest


@pytest.fixture
def slow_setup():
    subprocess.run([sys.executable, "-c", "import time; time.sleep(0.3)"], check=True)


def test_starts_a_program(slow_setup):
    subprocess.run([sys.executable, "-m", "json.tool", "--help"], capture_output=True, check=True)


def test_plain_too():
    pass
"""


def test_a_session_on_two_xdist_workers_is_recorded_whole_file_by_file(
    session: pytest.Pytester, tmp_path: Path
) -> None:
    """make test runs workers: each collects the suite and runs a share; the record is one, with
    each file's time, fixtures and programs."""
    (session.path / "suite" / "test_spawning.py").write_text(SPAWNING)
    run(session, "-n", "2")
    entry = recorded(tmp_path)["pytest"]
    assert entry["tests"] == 5
    assert entry["outcomes"] == {"passed": 5}
    assert entry["tiers"] == {**TIERS, "unit": 3}
    files = {f["file"]: f for f in entry["files"]}
    assert set(files) == {"suite/test_suite.py", "suite/test_spawning.py"}
    spawning = files["suite/test_spawning.py"]
    assert spawning["tests"] == 2
    assert spawning["programs"] == {"python -c": 1, "python -m json.tool": 1}
    assert spawning["fixtures"]["slow_setup"] >= 0.3  # its setup waited out the child
    assert spawning["wall_s"] >= spawning["fixtures"]["slow_setup"]
    assert spawning["cpu_s"] > 0  # the children it waited for count
    assert entry["serial_s"] == pytest.approx(sum(f["wall_s"] for f in entry["files"]), abs=0.2)
    assert {w["worker"] for w in entry["workers"]} == {"gw0", "gw1"}
    assert all(w["finished_s"] is not None for w in entry["workers"])
    assert entry["files"][0]["wall_s"] >= entry["files"][-1]["wall_s"]  # slowest first
    run(session, "-n", "2", "-k", "plain")  # a part, on workers too, writes nothing
    assert recorded(tmp_path)["pytest"] == entry


@pytest.mark.parametrize(
    ("argv", "program"),
    [
        (["runuser", "-u", "postgres", "--", "/usr/lib/postgresql/15/bin/initdb", "-D", "x"], "initdb"),
        (["/venv/bin/python3", "-mpytest", "-m", "not slow"], "python -m pytest"),
        (["python", "-I", "-m", "uvicorn", "app:app"], "python -m uvicorn"),
        (["/usr/bin/env", "A=1", "python3", "serve.py"], "python serve.py"),
        (["python", "-c", "print(1)"], "python -c"),
        (["/usr/bin/redis-server", "--port", "0"], "redis-server"),
    ],
)
def test_a_program_is_named_through_its_wrapper_and_its_interpreter(argv: list[str], program: str) -> None:
    assert program_of(argv) == program


def test_make_test_is_shown_beside_the_same_suite_run_serially_and_its_slowest_files(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    def file(name: str, wall: float) -> dict:
        return {"file": name, "tests": 3, "wall_s": wall, "cpu_s": wall / 2, "fixtures": {}, "programs": {}}

    unit = {**UNIT_RUN, "at": "2026-12-01T18:00:00Z", "hidden": True, "serial_s": 100.0,
            "files": [file("tests/a.py", 40.0), file("tests/b.py", 1.0)]}  # fmt: skip
    rest = {**UNIT_RUN, "wall_s": 300.0, "at": "2026-12-01T18:06:00Z", "serial_s": 800.0,
            "tiers": {"slow": 850}, "files": [file("tests/c.py", 90.0), file("tests/b.py", 2.25)]}  # fmt: skip
    timing = tmp_path / "timing.json"
    timing.write_text(json.dumps({"unit": unit, "rest": rest}))
    monkeypatch.setattr("bench.test_timing.TIMING", timing)
    figure = test_timing.figures()[0]
    assert figure.value is not None
    assert figure.baseline is not None
    assert figure.value == pytest.approx((51.5 + 300.0) / 60)
    assert figure.baseline == pytest.approx(900.0 / 60)  # the files' times added up
    assert figure.ratio == pytest.approx(figure.value / figure.baseline)
    assert figure.target == "<= 12 min"
    assert [f["file"] for f in test_timing.slowest_files(2)] == ["tests/c.py", "tests/a.py"]
    # Every file, the slowest first; one with tests in both tiers by its two times added up.
    assert test_timing.file_walls() == {"tests/c.py": 90.0, "tests/a.py": 40.0, "tests/b.py": 3.2}
    assert list(test_timing.file_walls()) == ["tests/c.py", "tests/a.py", "tests/b.py"]
    table = slowest_table({"slowest_files": test_timing.slowest_files()})
    assert "| `tests/c.py` | 3 | 90.0 s | 45.0 s | — | — |" in table
