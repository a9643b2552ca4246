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
"""

from __future__ import annotations

import json
import os
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

TIMING = Path(os.environ.get("ACKLAB_TEST_TIMING") or Path(__file__).with_name(".test-timing.json"))
_STARTED = pytest.StashKey[float]()
_DESELECTED = pytest.StashKey[int]()
_FROM_WORKERS = pytest.StashKey[dict[str, Any]]()
WORKER_KEY = "acklab_test_timing"


def pytest_sessionstart(session: pytest.Session) -> None:
    session.stash[_STARTED] = time.perf_counter()
    session.stash[_DESELECTED] = 0


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
    said = getattr(node, "workeroutput", {}).get(WORKER_KEY)
    if said is not None and error is None:
        node.config.stash[_FROM_WORKERS] = said


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
        return
    if getattr(config.option, "dist", "no") != "no":  # the controller: the workers collected
        held = config.stash.get(_FROM_WORKERS, None)
    else:
        kind = _kind(session)
        held = _held(session, kind) if kind is not None else None
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
    previous: dict[str, Any] = {}
    if TIMING.exists():
        try:
            previous = json.loads(TIMING.read_text())
        except ValueError:
            previous = {}
    previous[kind] = entry
    TIMING.write_text(json.dumps(previous, indent=2) + "\n")
