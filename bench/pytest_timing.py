"""A pytest plugin that records how long a *whole* test session took, for ``python -m bench``.

Enabled with ``-p bench.pytest_timing`` (``make test`` and ``make unit`` pass it; ``python -m
bench --make-test`` passes it through ``PYTEST_ADDOPTS``). Two sessions are recorded, each
under its own key of ``bench/.test-timing.json``:

* ``pytest``: every test over the configured ``testpaths`` with nothing selected away (no
  -k, -m, --lf, -x, no path arguments, nothing deselected), with how many tests each tier
  marker holds (tests/tiers.py);
* ``unit``: the same with ``--tier=unit`` (``make unit``), the unit tier whole, and whether
  the system dependencies were hidden from it (scripts/unit.sh);
* ``rest``: the same with ``--tier=rest``, every test outside the unit tier, with its counts
  per tier. ``make test`` runs ``unit`` then ``rest``: together they are the suite.

Any other session (a quick local run) writes nothing, so it never replaces a real figure.
Under pytest-xdist (``make test`` runs two workers) every worker collects the whole suite:
the workers say what kind of session it is and what it holds, and only the controller, which
sees every outcome and the whole wall time, writes the record.
The test counts in docs/performance.md come from this record (bench/test_timing.py), never from a hand.
``ACKLAB_TEST_TIMING`` names another file (the plugin's own tests write there).

Each whole session's entry also says where its time went (bench/test_files.py): every test
file's wall and CPU time, the fixtures whose setup cost most and the programs it started,
each worker's busy time and when it finished, and the sum of the files' times (what one
worker would have taken: the serial baseline). The end of the terminal report lists the
slowest files of any session.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Generator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from bench.test_files import Recorder, combine, command_of, cpu_seconds, worker_name

TIMING = Path(os.environ.get("ACKLAB_TEST_TIMING") or Path(__file__).with_name(".test-timing.json"))
_STARTED = pytest.StashKey[float]()
_DESELECTED = pytest.StashKey[int]()
_FROM_WORKERS = pytest.StashKey[dict[str, Any]]()
_SHARES = pytest.StashKey[list[dict[str, Any]]]()
_RECORD = pytest.StashKey[dict[str, Any]]()
_EPOCH = pytest.StashKey[float]()
WORKER_KEY = "acklab_test_timing"
FILES_KEY = "acklab_test_files"
SHOWN = 10  # slowest files listed at the end of the terminal report
# The recorder of this process's tests; the audit hook (which cannot be removed) reads it.
_recorders: list[Recorder] = []


def _audit(event: str, args: tuple[Any, ...], recorders: list[Recorder] = _recorders) -> None:
    # What the hook reads it holds itself: the module's globals are gone at interpreter shutdown.
    if not recorders or recorders[-1].current is None:
        return
    argv = command_of(event, args)
    if argv is not None:
        recorders[-1].started(argv)


def pytest_configure(config: pytest.Config) -> None:
    if not _recorders:
        sys.addaudithook(_audit)
    _recorders.append(Recorder(worker=worker_name(config)))
    config.stash[_SHARES] = []


def pytest_unconfigure(config: pytest.Config) -> None:
    if _recorders:
        _recorders.pop()


def pytest_sessionstart(session: pytest.Session) -> None:
    session.stash[_STARTED] = time.perf_counter()
    session.stash[_EPOCH] = time.time()
    session.stash[_DESELECTED] = 0


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(
    item: pytest.Item, nextitem: pytest.Item | None
) -> Generator[None, object, object]:
    recorder = _recorders[-1] if _recorders else None
    if recorder is None:
        return (yield)
    path = item.nodeid.split("::", 1)[0]
    recorder.current = path
    started, wall, cpu = time.time(), time.perf_counter(), cpu_seconds()
    try:
        return (yield)
    finally:
        recorder.test_done(path, started, time.perf_counter() - wall, cpu_seconds() - cpu)
        recorder.current = None


@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup(
    fixturedef: pytest.FixtureDef[Any], request: pytest.FixtureRequest
) -> Generator[None, object, object]:
    started = time.perf_counter()
    try:
        return (yield)
    finally:
        if _recorders:
            _recorders[-1].fixture_done(fixturedef.argname, time.perf_counter() - started)


def pytest_deselected(items: list[pytest.Item]) -> None:
    # No session argument here: the count is kept on the config's session via the items.
    if items:
        session = items[0].session
        session.stash[_DESELECTED] = session.stash.get(_DESELECTED, 0) + len(items)


def _kind(session: pytest.Session) -> str | None:
    """ "pytest" for the whole suite, "unit" / "rest" for a whole tier, None for anything less."""
    from tests.tiers import TIER_DESELECTED

    config, option = session.config, session.config.option
    plain = (
        config.args_source == pytest.Config.ArgsSource.TESTPATHS
        and not option.keyword
        and not option.markexpr
        and not getattr(option, "lf", False)
        and not getattr(option, "exitfirst", False)
    )
    if not plain:
        return None
    deselected = session.stash.get(_DESELECTED, 0)
    tier = getattr(option, "tier", None)
    if tier is None:
        return "pytest" if deselected == 0 else None
    if tier in ("unit", "rest") and deselected == config.stash.get(TIER_DESELECTED, -1):
        return str(tier)
    return None


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    """xdist's controller: keep what a worker said of the session (all workers say the same)."""
    output = getattr(node, "workeroutput", {})
    said = output.get(WORKER_KEY)
    if said is not None and error is None:
        node.config.stash[_FROM_WORKERS] = said
    if output.get(FILES_KEY) is not None:
        node.config.stash.setdefault(_SHARES, []).append(output[FILES_KEY])


def _held(session: pytest.Session, kind: str) -> dict[str, Any]:
    from tests.tiers import counts

    return {
        "kind": kind,
        "tests": session.testscollected,  # after deselection: what ran
        "tiers": counts(session.items) if kind in ("pytest", "rest") else None,
    }


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _STARTED not in session.stash:
        return
    config: Any = session.config
    if hasattr(config, "workerinput"):  # an xdist worker: it ran a share; the controller writes
        kind = _kind(session)
        config.workeroutput[WORKER_KEY] = _held(session, kind) if kind is not None else None
        config.workeroutput[FILES_KEY] = _recorders[-1].share() if _recorders else None
        return
    if getattr(config.option, "dist", "no") != "no":  # the controller: the workers collected
        held = config.stash.get(_FROM_WORKERS, None)
        shares = config.stash.get(_SHARES, [])
    else:
        kind = _kind(session)
        held = _held(session, kind) if kind is not None else None
        shares = [_recorders[-1].share()] if _recorders else []
    record = combine(shares, session.stash[_EPOCH])
    config.stash[_RECORD] = record
    if held is None:
        return
    kind = held["kind"]

    reporter: Any = session.config.pluginmanager.get_plugin("terminalreporter")
    stats = getattr(reporter, "stats", {}) if reporter is not None else {}
    outcomes = {
        k: len(v) for k, v in stats.items() if k in ("passed", "failed", "error", "skipped", "xfailed")
    }
    entry: dict[str, Any] = {
        "wall_s": round(time.perf_counter() - session.stash[_STARTED], 1),
        "exit_status": int(exitstatus),
        "tests": held["tests"],
        "outcomes": outcomes,
        "cpus": os.cpu_count(),
        "at": datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z"),
    }
    if kind in ("pytest", "rest"):
        entry["tiers"] = held["tiers"]
    if kind == "unit":
        entry["hidden"] = os.environ.get("ACKLAB_UNIT_HIDING") == "1"
    entry.update(record)
    previous: dict[str, Any] = {}
    if TIMING.exists():
        try:
            previous = json.loads(TIMING.read_text())
        except ValueError:
            previous = {}
    previous[kind] = entry
    TIMING.write_text(json.dumps(previous, indent=2) + "\n")


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    record = config.stash.get(_RECORD, None)
    if not record or not record["files"]:
        return
    terminalreporter.section("slowest test files (bench/test_files.py)")
    for f in record["files"][:SHOWN]:
        programs = ", ".join(f"{name} x{n}" for name, n in f["programs"].items())
        terminalreporter.write_line(
            f"{f['wall_s']:8.1f} s wall {f['cpu_s']:7.1f} s CPU  {f['file']} ({f['tests']} tests"
            + (f"; started {programs}" if programs else "")
            + ")"
        )
    finished = [w["finished_s"] for w in record["workers"] if w["finished_s"] is not None]
    if len(finished) > 1:
        terminalreporter.write_line(
            f"workers finished at {', '.join(f'{s:.0f}' for s in sorted(finished))} s; "
            f"the files' times add up to {record['serial_s']:.0f} s ({record['cpu_s']:.0f} s CPU)"
        )
