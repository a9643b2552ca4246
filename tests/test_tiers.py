"""The test tiers hold: markers follow what a test uses, a test that reaches a system
dependency without its marker fails, and the unit tier runs with those dependencies hidden."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests import tiers

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    ("argv", "marker"),
    [
        (["/usr/lib/postgresql/15/bin/initdb", "-D", "/tmp/x"], "postgres"),
        (["runuser", "-u", "postgres", "--", "/usr/lib/postgresql/15/bin/pg_ctl", "start"], "postgres"),
        (["runuser", "-u", "postgres", "--", "/opt/pgsql/bin/initdb"], "postgres"),
        (["/usr/local/pgsql/bin/postgres", "-D", "data"], "postgres"),
        (["psql", "-c", "select 1"], "postgres"),
        (["/usr/bin/chromium", "--headless"], "browser"),
        ([".venv/lib/python3.11/site-packages/playwright/driver/node", "cli.js", "run-driver"], "browser"),
        (["gitlab-ci-local", "--list-json"], "gitlab_ci_local"),
        (["/work/acklab/scripts/pipeline.sh", "--mr"], "gitlab_ci_local"),
        (["node", "x.js"], "node"),
        (["python", "-m", "acklab", "run", "--db", "postgres"], None),
        (["git", "commit", "-m", "node and chromium and postgres"], None),
        (["bash", "-c", "echo initdb"], None),
        (["/usr/bin/git", "-C", "/srv/postgres", "status"], None),
    ],
)
def test_a_process_is_recognised_by_the_program_it_runs(argv: list[str], marker: str | None) -> None:
    need = tiers.need_of(argv)
    assert (need.marker if need else None) == marker


INNER_TESTS = """
import subprocess
import pytest
from tests.tiers import UnmarkedNeed

INITDB = "/nonexistent/usr/lib/postgresql/99/bin/initdb"  # refused (or not found) before it runs


def test_unmarked_starts_postgres():
    subprocess.run([INITDB, "--version"])


@pytest.mark.postgres
def test_marked_starts_postgres():
    with pytest.raises(FileNotFoundError):
        subprocess.run([INITDB, "--version"])


def test_unmarked_swallows_the_refusal():
    try:
        subprocess.run([INITDB, "--version"])
    except UnmarkedNeed:
        pass


def test_unmarked_asks_for_pg_url_at_run_time(request):
    request.getfixturevalue("pg_url")


def test_uses_pg_url_through_a_fixture(database):
    assert database == "postgresql://fake"


def test_needs_nothing():
    assert subprocess.run(["true"]).returncode == 0
"""

INNER_CONFTEST = """
import pytest

pytest_plugins = ("tests.tiers",)


@pytest.fixture
def pg_url():
    return "postgresql://fake"


@pytest.fixture
def database(pg_url):
    return pg_url
"""


@pytest.fixture
def inner(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """A test session of its own (a process), with tests/tiers.py as its only plugin: the installed
    ones (schemathesis, hypothesis, acklab's own...) are not loaded, most of a session's start."""
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    pytester.makeconftest(INNER_CONFTEST)
    pytester.makepyfile(test_inner=INNER_TESTS)
    return pytester


def outcomes(result: pytest.RunResult) -> dict[str, str]:
    found = re.findall(r"^(PASSED|FAILED|ERROR) test_inner\.py::(\w+)", result.stdout.str(), re.M)
    return {name: outcome for outcome, name in found}


def test_a_test_that_reaches_a_dependency_without_its_marker_fails(inner: pytest.Pytester) -> None:
    result = inner.runpytest_subprocess("-rA", "-p", "no:cacheprovider")
    assert outcomes(result) == {
        "test_unmarked_starts_postgres": "FAILED",
        "test_marked_starts_postgres": "PASSED",
        "test_unmarked_swallows_the_refusal": "FAILED",
        "test_unmarked_asks_for_pg_url_at_run_time": "FAILED",
        "test_uses_pg_url_through_a_fixture": "PASSED",
        "test_needs_nothing": "PASSED",
    }, result.stdout.str()
    text = result.stdout.str()
    assert "test_unmarked_starts_postgres started '/nonexistent/usr/lib/postgresql/99/bin/initdb'" in text
    assert (
        "asked for the pg_url fixture, the private PostgreSQL server, without the `postgres` marker" in text
    )


def test_markers_follow_fixtures_and_the_unit_tier_leaves_them_out(inner: pytest.Pytester) -> None:
    marked = inner.runpytest_subprocess("--collect-only", "-q", "-m", "postgres", "-p", "no:cacheprovider")
    assert sorted(re.findall(r"::(\w+)", marked.stdout.str())) == [
        "test_marked_starts_postgres",
        "test_uses_pg_url_through_a_fixture",  # through the `database` fixture
    ]
    unit = inner.runpytest_subprocess("--collect-only", "-q", "--tier=unit", "-p", "no:cacheprovider")
    names = re.findall(r"::(\w+)", unit.stdout.str())
    assert "test_uses_pg_url_through_a_fixture" not in names
    assert "test_marked_starts_postgres" not in names
    assert "test_needs_nothing" in names
    assert "2 deselected" in unit.stdout.str()


def test_every_need_names_fixtures_the_suite_defines() -> None:
    conftests = "\n".join(p.read_text(encoding="utf-8") for p in (ROOT / "tests").rglob("conftest.py"))
    for need in tiers.NEEDS:
        for fixture in need.fixtures:
            assert re.search(rf"^def {fixture}\(", conftests, re.M), f"{need.marker}: no fixture {fixture}"


def test_the_hiding_list_covers_every_need() -> None:
    listed = tiers.hidden(str(ROOT))
    programs = {path for kind, path in listed if kind == "program"}
    for need in tiers.NEEDS:
        assert need.programs - {"pipeline.sh"} <= programs, need.marker


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_scripts_unit_hides_the_system_dependencies(tmp_path: Path) -> None:
    """scripts/unit.sh, on a few tests: the programs are hidden, none of them answers (the script
    exits 4 when one does), and the tier runs. `make test` runs the whole unit tier this way."""
    done = subprocess.run(
        [str(ROOT / "scripts" / "unit.sh"), "-q", "-p", "no:cacheprovider", f"--basetemp={tmp_path / 'tmp'}",
         "tests/test_tiers.py", "-k", "recognised"],
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )  # fmt: skip
    assert "acklab: hidden from the unit tier: " in done.stderr, done.stderr[-3000:]
    for shown in ("initdb", "chromium", "node", "/usr/lib/postgresql/"):
        assert shown in done.stderr
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    assert re.search(r"1[0-9] passed", done.stdout), done.stdout[-1000:]


def test_make_test_runs_the_unit_tier_hidden_and_then_every_other_test() -> None:
    """No test runs twice and none is left out: the unit tier through scripts/unit.sh, then the
    complement (`--tier=rest`), in that order, both stopping `make` when they fail."""
    dry = subprocess.run(["make", "-n", "pytest"], cwd=ROOT, capture_output=True, text=True, check=False)
    shown = dry.stdout
    assert dry.returncode == 0, dry.stderr
    assert "\nscripts/unit.sh " in shown, shown
    assert "--tier=rest" in shown, shown
    assert shown.index("\nscripts/unit.sh ") < shown.index("--tier=rest"), shown


def test_the_unit_tier_and_the_rest_split_the_suite(inner: pytest.Pytester) -> None:
    unit_run = inner.runpytest_subprocess("--tier=unit", "-p", "no:cacheprovider", "--collect-only", "-q")
    rest_run = inner.runpytest_subprocess("--tier=rest", "-p", "no:cacheprovider", "--collect-only", "-q")
    whole = inner.runpytest_subprocess("-p", "no:cacheprovider", "--collect-only", "-q")

    def ids(result: pytest.RunResult) -> set[str]:
        return {line for line in result.outlines if "::" in line}

    assert ids(unit_run)
    assert ids(rest_run)
    assert ids(unit_run) | ids(rest_run) == ids(whole)
    assert not ids(unit_run) & ids(rest_run)
