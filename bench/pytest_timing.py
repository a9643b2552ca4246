"""A pytest plugin that records how long a *full* test session took, for ``python -m bench``.

Enabled with ``-p bench.pytest_timing`` (``python -m bench --make-test`` passes it through
``PYTEST_ADDOPTS``), or for every run by ``pytest_plugins = ("bench.pytest_timing",)`` in
tests/conftest.py. Only a session over the configured ``testpaths`` with nothing selected
away (no -k, -m, --lf, no path arguments, nothing deselected) writes its timing, so a
quick local run never replaces the figure of a real one.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

TIMING = Path(__file__).with_name(".test-timing.json")
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


def _full(session: pytest.Session) -> bool:
    config, option = session.config, session.config.option
    return (
        config.args_source == pytest.Config.ArgsSource.TESTPATHS
        and not option.keyword
        and not option.markexpr
        and not getattr(option, "lf", False)
        and not getattr(option, "exitfirst", False)
        and session.stash.get(_DESELECTED, 0) == 0
    )


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _STARTED not in session.stash or not _full(session):
        return
    reporter: Any = session.config.pluginmanager.get_plugin("terminalreporter")
    stats = getattr(reporter, "stats", {}) if reporter is not None else {}
    counts = {k: len(v) for k, v in stats.items() if k in ("passed", "failed", "error", "skipped", "xfailed")}
    previous: dict[str, Any] = {}
    if TIMING.exists():
        try:
            previous = json.loads(TIMING.read_text())
        except ValueError:
            previous = {}
    previous["pytest"] = {
        "wall_s": round(time.perf_counter() - session.stash[_STARTED], 1),
        "exit_status": int(exitstatus),
        "tests": session.testscollected,
        "outcomes": counts,
        "at": datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z"),
    }
    TIMING.write_text(json.dumps(previous, indent=2) + "\n")
