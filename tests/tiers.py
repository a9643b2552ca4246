"""Test tiers: what a test needs beyond Python, as pytest markers — derived, then checked.

    marker           the test needs                                  marked by
    postgres         the private PostgreSQL server (initdb, pg_ctl)  the postgres_server / pg_url fixtures
    browser          headless Chromium driven by Playwright          the browser fixture
    gitlab_ci_local  gitlab-ci-local (on Node)                        the gitlab_ci_local fixture
    node             Node.js, and BullMQ from npm (.tools)            hand
    redis            Debian's redis-server (the lab's services:)      the redis_server fixture, or hand
    faketime         Debian's libfaketime (a shifted consumer clock)  the shifted_clock fixture, or hand
    slow             seconds to minutes: real runs, servers, builds  hand (a module's pytestmark)

A test with none of them is in the unit tier: ``pytest --tier=unit`` runs only those, and
``make unit`` runs that with PostgreSQL, Chromium, Node, gitlab-ci-local, Redis and libfaketime hidden
(scripts/unit.sh). ``make test`` runs every tier: the unit tier that way, then ``--tier=rest``
(the tests that carry a marker), so no test runs twice.

Marking is automatic wherever collection can see the need: a test that uses a need's
fixture, directly or through other fixtures, gets its marker, wherever its module lives or
moves. What collection cannot see is checked while the tests run, in every session:

- a need's fixture requested at run time (``request.getfixturevalue``) by a test without
  the marker fails that test when its outcome is reported;
- every process a test starts passes an audit hook (``sys.addaudithook``): starting
  PostgreSQL's programs, Chromium or Playwright's driver, gitlab-ci-local or Node from a test
  without the matching marker is refused before the program runs, and fails the test.

Processes started by a test's processes are out of the hook's sight; the unit tier run with
the programs hidden (``tests/test_tiers.py``) is what proves those absent too.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Generator, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import pytest


@dataclass(frozen=True)
class Need:
    """A system dependency a test may need: its marker, and how its use is recognised."""

    marker: str
    what: str
    fixtures: frozenset[str]  # using one of these (even indirectly) is needing this
    programs: frozenset[str]  # executable names that are this dependency
    paths: tuple[str, ...]  # path fragments of its installation
    homes: tuple[str, ...]  # directories scripts/unit.sh hides (~ and <repo> expanded)

    def started_by(self, argv: Sequence[str]) -> bool:
        """Whether a process started with `argv` runs this dependency (directly or through a
        wrapper such as `runuser ... -- /usr/lib/postgresql/15/bin/initdb`)."""
        if any(fragment in arg for arg in argv for fragment in self.paths):
            return True
        # Programs by name: the first word, and the command a wrapper runs; never any other
        # argument (`--db postgres`, a commit message naming node, a directory called postgres).
        programs = list(argv[:1])
        if argv and os.path.basename(argv[0]) in WRAPPERS and "--" in argv[:-1]:
            programs.append(argv[argv.index("--") + 1])
        return any(os.path.basename(program) in self.programs for program in programs)


WRAPPERS = frozenset({"runuser", "sudo", "su", "setsid", "env", "nice", "timeout", "nohup"})

NEEDS = (
    Need(
        marker="postgres",
        what="the private PostgreSQL server",
        fixtures=frozenset({"postgres_server", "pg_url"}),
        programs=frozenset(
            {"initdb", "pg_ctl", "postgres", "psql", "pg_ctlcluster", "pg_isready", "createdb"}
        ),
        paths=("/usr/lib/postgresql/",),
        homes=("/usr/lib/postgresql",),
    ),
    # Before gitlab_ci_local: Playwright's driver is a `node` binary of its own.
    Need(
        marker="browser",
        what="headless Chromium (Playwright)",
        fixtures=frozenset({"browser"}),
        programs=frozenset({"chromium", "chromium-browser", "chrome", "google-chrome", "headless_shell"}),
        paths=("/playwright/driver/", "/usr/lib/chromium/"),
        homes=("/usr/lib/chromium", "<playwright>/driver", "~/.cache/ms-playwright"),
    ),
    Need(
        marker="gitlab_ci_local",
        what="gitlab-ci-local (Node)",
        fixtures=frozenset({"gitlab_ci_local"}),
        # scripts/pipeline.sh is the project's own way of running gitlab-ci-local.
        programs=frozenset({"gitlab-ci-local", "pipeline.sh"}),
        paths=("/gitlab-ci-local/",),
        homes=("<repo>/.tools",),
    ),
    # Node itself: what gitlab-ci-local runs on, and the queue consumers on BullMQ (tests/consumers).
    Need(
        marker="node",
        what="Node.js and the npm packages in .tools (BullMQ)",
        fixtures=frozenset(),
        programs=frozenset({"node", "nodejs", "npm", "npx"}),
        paths=(),
        homes=("/usr/lib/node_modules", "/usr/local/lib/node_modules"),
    ),
    Need(
        marker="redis",
        what="Debian's redis-server",
        fixtures=frozenset({"redis_server"}),
        programs=frozenset({"redis-server", "redis-cli"}),
        paths=(),
        homes=(),
    ),
    # A library, not a program: the audit hook cannot see it in an argv (it is preloaded through
    # the environment); hiding its folder is what proves the unit tier does without it.
    Need(
        marker="faketime",
        what="Debian's libfaketime",
        fixtures=frozenset({"shifted_clock"}),
        programs=frozenset({"faketime"}),
        paths=("/faketime/libfaketime",),
        homes=(
            "/usr/lib/x86_64-linux-gnu/faketime",
            "/usr/lib/aarch64-linux-gnu/faketime",
            "/usr/lib/faketime",
        ),
    ),
)
SLOW = "slow"
MARKERS = (*(need.marker for need in NEEDS), SLOW)
"""A test carrying any of these is outside the unit tier."""

_BY_FIXTURE = {fixture: need for need in NEEDS for fixture in need.fixtures}
_SPAWNS = frozenset({"subprocess.Popen", "os.posix_spawn", "os.exec", "os.spawn", "os.system"})
_UNMARKED = pytest.StashKey[list[str]]()
TIER_DESELECTED = pytest.StashKey[int]()
"""How many tests ``--tier`` left out (bench/pytest_timing.py tells a whole tier from a part)."""
_running: list[pytest.Item] = []  # the test whose setup or call is on the stack
_hooked: list[object] = []


class UnmarkedNeed(RuntimeError):
    """A test used a system dependency without the marker that says it needs it."""


def need_of(argv: Sequence[str]) -> Need | None:
    """The system dependency a process started with `argv` is, if any."""
    return next((need for need in NEEDS if need.started_by(argv)), None)


def unit(item: pytest.Item) -> bool:
    """Whether a test is in the unit tier (it carries none of the tier markers)."""
    return not any(item.get_closest_marker(marker) for marker in MARKERS)


def _unmarked(item: pytest.Item, need: Need, how: str) -> str:
    message = (
        f"{item.nodeid} {how}, {need.what}, without the `{need.marker}` marker: use the "
        f"{' or '.join(sorted(need.fixtures))} fixture (it marks the test), or mark it "
        f"@pytest.mark.{need.marker} (tests/tiers.py)"
    )
    item.stash.setdefault(_UNMARKED, []).append(message)
    return message


def _argv(event: str, args: tuple[Any, ...]) -> list[str]:
    """The command line of a process-start audit event (see the audit events table)."""
    if event == "subprocess.Popen":
        executable, command = args[0], args[1]
    elif event == "os.spawn":
        executable, command = args[1], args[2]
    elif event == "os.system":
        executable, command = None, str(args[0]).split()
    else:  # os.exec, os.posix_spawn: (path, argv, env)
        executable, command = args[0], args[1]
    if isinstance(command, str | bytes | os.PathLike):
        command = [command]
    found = [os.fsdecode(part) for part in command or ()]
    if executable is not None:
        found.insert(1 if found else 0, os.fsdecode(executable))
    return found


def _audit(
    event: str, args: tuple[Any, ...], spawns: frozenset[str] = _SPAWNS, running: list[pytest.Item] = _running
) -> None:
    # The hook outlives the module's globals (they are None while the interpreter shuts down):
    # what it reads it holds itself.
    if event not in spawns or not running:
        return
    item = running[-1]
    argv = _argv(event, args)
    need = need_of(argv)
    if need is not None and not item.get_closest_marker(need.marker):
        raise UnmarkedNeed(_unmarked(item, need, f"started {argv[0]!r}"))


def pytest_configure(config: pytest.Config) -> None:
    for need in NEEDS:
        config.addinivalue_line("markers", f"{need.marker}: needs {need.what}; marked by its fixture")
    config.addinivalue_line(
        "markers", f"{SLOW}: seconds to minutes (real runs, servers, builds); outside the unit tier"
    )
    # An audit hook cannot be removed (once per process); outside a test it does nothing.
    if not _hooked:
        sys.addaudithook(_audit)
        _hooked.append(_audit)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--tier",
        choices=("unit", "rest"),
        default=None,
        help=f"run one part only: unit, the tests marked none of {', '.join(MARKERS)}; rest, every other "
        "test (`make test` runs the unit tier hidden, then the rest)",
    )


@pytest.hookimpl(tryfirst=True)  # before -m deselects by the markers added here
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        for fixture in getattr(item, "fixturenames", ()):
            need = _BY_FIXTURE.get(fixture)
            if need is not None and not item.get_closest_marker(need.marker):
                item.add_marker(need.marker)
    tier = config.getoption("tier")
    if tier in ("unit", "rest"):
        kept = [item for item in items if unit(item) == (tier == "unit")]
        left = [item for item in items if unit(item) != (tier == "unit")]
        config.stash[TIER_DESELECTED] = len(left)
        if left:
            config.hook.pytest_deselected(items=left)
            items[:] = kept


def _running_item(item: pytest.Item) -> Generator[None, object, object]:
    _running.append(item)
    try:
        return (yield)
    finally:
        _running.pop()


# Teardown is left out on purpose: a session's PostgreSQL stops in the last test's teardown.
@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, object, object]:
    return (yield from _running_item(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, object, object]:
    return (yield from _running_item(item))


@pytest.hookimpl(tryfirst=True)
def pytest_fixture_setup(fixturedef: pytest.FixtureDef[Any], request: pytest.FixtureRequest) -> None:
    # Recorded, not raised: a hook that raises here leaves pytest's fixture cache half set. The
    # test then fails when its outcome is reported.
    need = _BY_FIXTURE.get(fixturedef.argname)
    if need is not None and _running and not _running[-1].get_closest_marker(need.marker):
        _unmarked(_running[-1], need, f"asked for the {fixturedef.argname} fixture")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
    report = yield
    found = item.stash.get(_UNMARKED, [])
    if found and report.when in ("setup", "call"):
        # Even a test that caught the refusal and passed has used what it did not declare.
        text = "\n".join(found)
        if report.passed:
            report.outcome = "failed"
            report.longrepr = text
        elif text not in str(report.longrepr):
            report.sections.append(("tiers", text))
        item.stash[_UNMARKED] = []
    return report


def counts(items: Iterable[pytest.Item]) -> dict[str, int]:
    """How many of `items` carry each tier marker, and how many are in the unit tier."""
    items = list(items)
    found = {marker: sum(1 for i in items if i.get_closest_marker(marker)) for marker in MARKERS}
    return {"unit": sum(1 for i in items if unit(i)), **found}


def hidden(repo: str) -> list[tuple[str, str]]:
    """What scripts/unit.sh hides: ("dir", path) for each installation that exists here,
    ("program", name) for each program; the table above is the one list of both."""
    import importlib.util

    found = importlib.util.find_spec("playwright")
    playwright = os.path.dirname(found.origin) if found and found.origin else ""
    places = {"<repo>": repo, "<playwright>": playwright}
    out: list[tuple[str, str]] = []
    for need in NEEDS:
        for template in need.homes:
            home = template
            for token, value in places.items():
                home = home.replace(token, value)
            home = os.path.expanduser(home)
            if os.path.isabs(home) and os.path.isdir(home):  # an unresolved <playwright> is not
                out.append(("dir", home))
        out.extend(("program", name) for name in sorted(need.programs - {"pipeline.sh"}))
    return out


if __name__ == "__main__":
    # `python -m tests.tiers hidden REPO`: the list scripts/unit.sh reads, one "kind path" a line.
    if sys.argv[1:2] != ["hidden"] or len(sys.argv) != 3:
        sys.exit("usage: python -m tests.tiers hidden REPO")
    for kind, path in hidden(sys.argv[2]):
        print(kind, path)
