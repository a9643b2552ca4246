"""``make test`` wall time (target <= 12 min on a quiet 2-core machine, which leaves CI's 15 min
for a busier one) and ``make unit`` wall time (target <= 60 s), read from what the test runs
recorded, beside the suite run serially: what its files took added up (one worker's time).

The suite is far too slow to run inside the benchmark, so this figure is read from
``bench/.test-timing.json``:

* ``make_test``: a real ``make test``, timed end to end by ``python -m bench --make-test``
  (install, system deps, lint, typecheck, pytest);
* ``pytest``: a full pytest session, written by the ``bench.pytest_timing`` plugin (or the
  ``unit`` and ``rest`` sessions that ``make test`` runs one after the other, added up).

The figure is the ``make test`` timing when there is one, else the pytest session's (which
leaves out lint and typecheck, and says so). The unit tier's figure is its last whole run
(``make unit``: ``unit`` in the record). Nothing recorded: not measured. The notes carry the
test counts of those runs (tests per tier, outcomes): the counts in docs/performance.md are these.

`slowest_files` is where the time went: the slowest test files of the same sessions (the unit
tier's and the rest's together), each with its wall and CPU time, the fixtures that cost it
most and the programs it started (bench/test_files.py); ``python -m bench`` keeps them in
results.json and docs/performance.md lists them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.figures import Figure, not_measured, print_figure
from bench.pytest_timing import TIMING
from bench.test_files import SLOWEST, slowest, walls

NAME = "make test wall time"
BUDGET_MIN = 12.0
UNIT_NAME = "make unit wall time"
UNIT_BUDGET_S = 60.0
ROOT = Path(__file__).resolve().parent.parent


def time_make_test() -> dict[str, Any]:
    """Run ``make test`` in the project, timed; record it (and the pytest session) in TIMING."""
    # The environment as it is: the Makefile's pytest sessions load bench.pytest_timing themselves.
    # Adding it through PYTEST_ADDOPTS and PYTHONPATH reached every pytest the tests start in a
    # user's project (which has no bench package), and failed those tests.
    print("timing `make test` (this takes a while) ...", file=sys.stderr, flush=True)
    started = time.perf_counter()
    done = subprocess.run(["make", "test"], cwd=ROOT, check=False)
    entry = {
        "wall_s": round(time.perf_counter() - started, 1),
        "exit_code": done.returncode,
        "cpus": os.cpu_count(),
        "at": datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z"),
    }
    recorded = _recorded()
    recorded["make_test"] = entry
    TIMING.write_text(json.dumps(recorded, indent=2) + "\n")
    return entry


def _recorded() -> dict[str, Any]:
    try:
        found = json.loads(TIMING.read_text())
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def _within(at: str, end: str, span_s: float) -> bool:
    """Whether timestamp `at` falls in the `span_s` seconds that ended at `end` (plus a second)."""
    stamp, until = (datetime.fromisoformat(t.replace("Z", "+00:00")) for t in (at, end))
    return -1.0 <= (until - stamp).total_seconds() <= span_s + 1.0


def _outcomes(session: dict[str, Any]) -> str:
    return ", ".join(f"{n} {k}" for k, n in session.get("outcomes", {}).items())


def unit_figure(recorded: dict[str, Any]) -> Figure:
    """The unit tier's wall time, from the last whole `make unit` run."""
    unit: dict[str, Any] | None = recorded.get("unit")
    target = f"<= {UNIT_BUDGET_S:.0f} s"
    if not unit:
        return not_measured(
            UNIT_NAME, "s", f"no unit-tier run recorded in {TIMING.name}: run `make unit`", target
        )
    hidden = (
        "PostgreSQL, Chromium, Node and gitlab-ci-local hidden"
        if unit.get("hidden")
        else "system dependencies not hidden (no mount namespace)"
    )
    note = f"`make unit` at {unit['at']} on {unit.get('cpus', '?')} CPUs: {unit['tests']} tests ({_outcomes(unit)}); {hidden}"
    ran_through = unit["exit_status"] in (0, 1)  # failing tests do not shorten a run
    return Figure(
        UNIT_NAME,
        unit["wall_s"],
        "s",
        target=target,
        met=(unit["wall_s"] <= UNIT_BUDGET_S) if ran_through else None,
        note=note,
    )


def suite_session(recorded: dict[str, Any]) -> dict[str, Any] | None:
    """The whole suite's session: a plain `pytest` run, or — when newer — the unit tier and the
    rest that `make test` runs one after the other (the rest recorded after the unit tier)."""
    whole: dict[str, Any] | None = recorded.get("pytest")
    unit, rest = recorded.get("unit"), recorded.get("rest")
    if not (unit and rest) or rest["at"] < unit["at"] or (whole and whole["at"] > rest["at"]):
        return whole
    outcomes: dict[str, int] = {}
    for part in (unit, rest):
        for kind, n in part.get("outcomes", {}).items():
            outcomes[kind] = outcomes.get(kind, 0) + n
    statuses = [unit["exit_status"], rest["exit_status"]]
    serial = [part.get("serial_s") for part in (unit, rest)]
    return {
        # Sessions recorded before the files were: no serial figure.
        "serial_s": round(serial[0] + serial[1], 1)
        if serial[0] is not None and serial[1] is not None
        else None,
        "wall_s": round(unit["wall_s"] + rest["wall_s"], 1),
        "exit_status": max(statuses),
        "tests": unit["tests"] + rest["tests"],
        "outcomes": outcomes,
        "cpus": rest.get("cpus"),
        "at": rest["at"],
        "tiers": {**rest.get("tiers", {}), "unit": unit["tests"]},
    }


def figures(quick: bool = False) -> list[Figure]:
    recorded = _recorded()
    return [*_make_test_figures(recorded), unit_figure(recorded)]


def _suite_sessions() -> list[dict[str, Any]]:
    """The suite's last sessions: the unit tier and the rest, or a whole `pytest` if it came later."""
    recorded = _recorded()
    whole = recorded.get("pytest")
    unit, rest = recorded.get("unit"), recorded.get("rest")
    if unit and rest and not (whole and whole["at"] > rest["at"]):
        return [unit, rest]
    return [whole] if whole else []


def slowest_files(n: int = SLOWEST) -> list[dict[str, Any]]:
    """The `n` slowest test files of the suite's last sessions, as recorded; empty when no session
    recorded its files."""
    return slowest(_suite_sessions(), n)


def file_walls() -> dict[str, float]:
    """Every test file's wall time in the suite's last sessions, the slowest first (`file_walls` of
    results.json: the order tests/conftest.py hands the files out in)."""
    return walls(_suite_sessions())


def _make_test_figures(recorded: dict[str, Any]) -> list[Figure]:
    make: dict[str, Any] | None = recorded.get("make_test")
    session = suite_session(recorded)
    if not make and not session:
        return [
            not_measured(
                NAME,
                "min",
                f"no timing recorded in {TIMING.name}: run `python -m bench --only test_timing --make-test`",
                target=f"<= {BUDGET_MIN:.0f} min",
            )
        ]
    pytest_part = ""
    if session:
        tiers = ", ".join(f"{n} {k}" for k, n in session.get("tiers", {}).items())
        pytest_part = (
            f"pytest session {session['wall_s'] / 60:.1f} min ({session['tests']} tests: {_outcomes(session)}"
            + (f"; by tier: {tiers}" if tiers else "")
            + ")"
        )
    if make:
        minutes = make["wall_s"] / 60
        note = f"`make test` timed end to end on {make.get('cpus', '?')} CPUs at {make['at']}"
        # Failing tests do not shorten a run: when pytest ran to its end inside this `make test`
        # (lint and typecheck passed, the session was recorded), the wall time is the suite's.
        ran_through = (
            session is not None
            and session["exit_status"] in (0, 1)  # 1: some tests failed; 2+: interrupted, errors
            and _within(session["at"], make["at"], make["wall_s"])
        )
        ok = make["exit_code"] == 0 or ran_through
        if pytest_part and ran_through:
            note += f"; {pytest_part}"
        if not ok:
            note += f"; make test exited {make['exit_code']} before pytest finished: no verdict on the budget"
    else:
        assert session is not None
        minutes, ok = session["wall_s"] / 60, True
        note = f"{pytest_part}; lint and typecheck are not included"
    serial = session.get("serial_s") if session else None
    baseline = serial / 60 if serial else None
    if baseline is not None:
        note += (
            f"; baseline: the same tests run serially, their files' times added up ({baseline:.1f} min"
            " on one worker)"
        )
    return [
        Figure(
            NAME,
            minutes,
            "min",
            baseline=baseline,
            ratio=minutes / baseline if baseline else None,
            target=f"<= {BUDGET_MIN:.0f} min",
            met=(minutes <= BUDGET_MIN) if ok else None,
            note=note,
        )
    ]


def main() -> None:
    if "--make-test" in sys.argv[1:]:
        time_make_test()
    for figure in figures():
        print_figure(figure)


if __name__ == "__main__":
    main()
