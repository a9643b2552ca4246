"""The runs of one reliability figure, several at once, each in a process of its own.

A reliability figure counts how many of N runs got the verdict they must get, and its runs
share nothing: each builds its own consumer, database, ports and sinks. A run mostly waits
(a consumer booting, a compressed retry schedule, a visibility timeout: fleet's 50 s run
spends under a tenth of it on a CPU), so one after another they leave the machine idle.
`each` runs them `at_once()` at a time, every run in a worker process of its own — its own
interpreter, event loop and lock, as `acklab run`s started side by side are — and returns
their results in the order of the runs. The count is still of N runs: nothing is sampled,
nothing shared.

``python -m bench`` says how many at once (``--runs-at-once``, passed to the reliability parts
in `ENV`); a module run as a script runs them one after another unless `ENV` says otherwise.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import TypeVar

from acklab.evidence.exitcodes import AcklabError
from tests.consumers.scenarios import Scenario

ENV = "ACKLAB_BENCH_RUNS_AT_ONCE"
At = TypeVar("At")
Got = TypeVar("Got")


def at_once() -> int:
    """How many runs of one figure run at once (`ENV`, default 1); a bad value is refused by name."""
    raw = os.environ.get(ENV, "1")
    try:
        n = int(raw)
    except ValueError:
        n = 0
    if n < 1:
        raise ValueError(f"{ENV}={raw!r}: expected a whole number of runs at once, at least 1 (e.g. {ENV}=3)")
    return n


def each(run: Callable[[At], Got], runs: Sequence[At]) -> list[Got]:
    """`run(r)` for every `r` of `runs`, `at_once()` at a time, each in a process of its own;
    their results in the order of `runs`. `run` is a module-level function (a worker imports it
    by name) and every `r` pickles; one run that raises fails the figure, as it would in a loop."""
    width = min(at_once(), len(runs))
    if width <= 1:
        return [run(r) for r in runs]
    # spawn, not fork: the part's process may hold threads and servers a forked copy must not inherit.
    with ProcessPoolExecutor(width, mp_context=multiprocessing.get_context("spawn")) as pool:
        return list(pool.map(run, runs))


def shares(items: int, width: int) -> list[range]:
    """Which of `items` numbered items each of `width` workers takes: every `width`-th, from its own
    (none taken twice, none left; a worker's share is empty when there are fewer items than workers)."""
    return [range(k, items, width) for k in range(width)]


def described(runs: int) -> str:
    """How `each` runs `runs` runs, for a figure's note."""
    width = min(at_once(), runs)
    return f"{width} runs at once, each in a process of its own" if width > 1 else "one run after another"


def mismatches(scenario: Scenario, out: Path) -> list[str]:
    """One run of `scenario` into `out`: how its verdicts differ from what it must get (empty: as it
    must). A run the lab could not carry out (exit 4; with runs side by side, e.g. a port another
    run's service took between the pick and the start) is a run without its verdict: counted as not
    right and named, not a crash that loses the figure's other runs."""
    try:
        return scenario.mismatches(scenario.run(out))
    except AcklabError as exc:
        return [f"the lab failed: {exc}"[:300]]
