"""A pytest plugin that records how long a *whole* test session took, for ``python -m bench``.

Enabled with ``-p bench.pytest_timing`` (``make test`` and ``make unit`` pass it; ``python -m
bench --make-test`` passes it through ``PYTEST_ADDOPTS``). Two sessions are recorded, each
under its own key of ``bench/.test-timing.json``:

* ``pytest``: every test over the configured ``testpaths`` with nothing selected away (no
  -k, -m, --lf, -x, no path arguments, nothing deselected), with how many tests each tier
  marker holds (tests/tiers.py);
* ``unit``: the same with ``--tier=unit`` (``make unit``), the unit tier whole, and whether
  the system dependencies were hidden from it (scripts/unit.sh).

Any other session (a quick local run) writes nothing, so it never replaces a real figure.
The README's test counts come from this record (bench/test_timing.py), never from a hand.
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


def pytest_sessionstart(session: pytest.Session) -> None:
    session.stash[_STARTED] = time.perf_counter()
    session.stash[_DESELECTED] = 0


def pytest_deselected(items: list[pytest.Item]) -> None:
    # No session argument here: the count is kept on the config's session via the items.
    if items:
        session = items[0].session
        session.stash[_DESELECTED] = session.stash.get(_DESELECTED, 0) + len(items)


def _kind(session: pytest.Session) -> str | None:
    """ "pytest" for the whole suite, "unit" for the whole unit tier, None for anything less."""
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
    if tier == "unit" and deselected == config.stash.get(TIER_DESELECTED, -1):
        return "unit"
    return None


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _STARTED not in session.stash:
        return
    kind = _kind(session)
    if kind is None:
        return
    from tests.tiers import counts

    reporter: Any = session.config.pluginmanager.get_plugin("terminalreporter")
    stats = getattr(reporter, "stats", {}) if reporter is not None else {}
    outcomes = {
        k: len(v) for k, v in stats.items() if k in ("passed", "failed", "error", "skipped", "xfailed")
    }
    entry: dict[str, Any] = {
        "wall_s": round(time.perf_counter() - session.stash[_STARTED], 1),
        "exit_status": int(exitstatus),
        "tests": session.testscollected,  # after deselection: what ran
        "outcomes": outcomes,
        "cpus": os.cpu_count(),
        "at": datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z"),
    }
    if kind == "pytest":
        entry["tiers"] = counts(session.items)
    else:
        entry["hidden"] = os.environ.get("ACKLAB_UNIT_HIDING") == "1"
    previous: dict[str, Any] = {}
    if TIMING.exists():
        try:
            previous = json.loads(TIMING.read_text())
        except ValueError:
            previous = {}
    previous[kind] = entry
    TIMING.write_text(json.dumps(previous, indent=2) + "\n")
