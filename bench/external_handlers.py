"""Correct handlers the lab has never seen pass every run: the rate behind one run in the suite.

tests/harness/test_external_handlers.py proves the behaviour with one run of each correct
handler (a Starlette app on uvicorn in a thread, described by a target spec, attacked with
the default experiments over a real socket); here each runs 20 times in a row against one
server and database, as the issue that introduced them asked (20/20) — the slow one on two
servers and databases side by side, 10 runs in a row on each (`SLOW_SHARDS`):

* `Receipt`: a unique claim per event id (SQLite);
* `Serialized`: a per-event lock (PostgreSQL, a private server started here);
* `Receipt(delay_s=SLOW_WORK_S)` (0.45 s) behind a sender timeout of 0.3 s: every first attempt
  times out while the handler still works, and the retry lands on a handler that is still
  working (`tests.harness.handlers` says why those margins).

Each handler gets one run first that is not counted: its first run in a fresh process, while
the bench starts every reliability part at once, is not what the figure is about.

A run counts when its verdict is `pass`; the figure is the share that did, target 100 %.
No figure here measures time: ``python -m bench`` runs this module beside the others that
measure no time either.

``python -m bench.external_handlers [--quick]`` prints the figures.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from acklab.harness.engine.runner import RunOptions, run
from acklab.harness.procs.pgtemp import PostgresServer, start_postgres
from acklab.harness.targets.server import ThreadedServer
from bench.figures import Figure, print_measured
from bench.runs import at_once, each, shares
from tests.harness.conftest import SECRET, SECRET_ENV, target_doc, write_spec
from tests.harness.handlers import (
    SLOW_SENDER_TIMEOUT_S,
    SLOW_WORK_S,
    Receipt,
    Serialized,
    Variant,
    handler_app,
)

RUNS = 20


@contextmanager
def served(variant: Variant, root: Path, name: str, db_url: str, timeout_s: float = 2.0) -> Iterator[Path]:
    """The handler on uvicorn in a thread, and the target spec that describes it."""
    with ThreadedServer(handler_app(variant, db_url, SECRET)) as server:
        doc = target_doc(name, f"{server.url}/hooks", db_url, timeout_s=timeout_s)
        yield write_spec(root / f"{name}.yaml", doc)


def passes(
    spec: Path, out: Path, runs: int, experiments: tuple[str, ...] = ()
) -> tuple[int, list[str], float]:
    """How many of `runs` runs (the default set, or `experiments`) passed, the first few that did
    not, and seconds a run."""
    wrong: list[str] = []
    good = 0
    # One run first, not counted: a handler's first run in a fresh process (its imports, its engine's
    # first statements, the lab's) while `python -m bench` starts every reliability part at once is
    # not what the figure is about. There, on a loaded machine, the slow handler (then behind a 0.1 s
    # sender timeout) answered too late on every attempt of run 0 ("the handler answered 200 later":
    # eventually-acknowledged): seen twice (a whole bench; the parts run five at a time).
    warm = run(RunOptions(target=str(spec), experiments=experiments, out=out / "warm-up", journal=False))
    shutil.rmtree(warm.bundle, ignore_errors=True)
    started = time.perf_counter()
    for n in range(runs):
        result = run(RunOptions(target=str(spec), experiments=experiments, out=out / str(n), journal=False))
        if result.verdict == "pass":
            good += 1
        else:
            wrong.append(f"run {n}: {why_not(result)}")
        shutil.rmtree(result.bundle, ignore_errors=True)
    return good, wrong[:3], (time.perf_counter() - started) / runs


def why_not(result: Any) -> str:
    """The experiments of a run that did not pass, each with its first violation (its invariant,
    trial and detail, cut short), or the reason the lab gave when it judged nothing (an error,
    an inconclusive run: no violation): what a missed figure needs to be looked into (the bundle
    is gone)."""
    found = []
    for entry in result.run["experiments"]:
        if entry["verdict"] in ("pass", "skipped"):
            continue
        first = ""
        for violation in entry.get("violations", [])[:1]:
            first = f" ({violation.get('invariant')}, trial {violation.get('trial')}: {str(violation.get('detail'))[:300]})"
        if not first and entry.get("reason"):
            first = f" ({str(entry['reason'])[:300]})"
        found.append(f"{entry['name']}={entry['verdict']}{first}")
    return ", ".join(found) or f"verdict {result.verdict}"


# Each handler on its own server and database: a piece of its own, measured in a process of its own
# beside the others by ``python -m bench`` (only the serialized handler needs PostgreSQL).
PIECES = ("receipt", "serialized", "slow")
# The slow handler's runs take 22 s each (its work outlasts every first attempt's timeout): they run
# on two servers and databases side by side, each its runs in a row (a shard), in processes of
# their own (`bench.runs.each`); one after another they were the bench's longest part (466 s).
SLOW_SHARDS = 2


def split(runs: int, shards: int) -> list[int]:
    """How many of `runs` each of at most `shards` shards runs, as evenly as they go (none empty)."""
    return [len(share) for share in shares(runs, max(1, min(shards, runs)))]


def slow_shard(case: tuple[Path, int, tuple[str, ...]]) -> tuple[int, list[str], float]:
    """One shard of the slow handler's runs (`passes`): its own server and SQLite database in `root`."""
    root, runs, experiments = case
    os.environ[SECRET_ENV] = SECRET  # a worker process of `bench.runs.each` is a fresh interpreter
    root.mkdir(parents=True, exist_ok=True)
    database = f"sqlite:///{root / 'slow.db'}"
    with served(Receipt(delay_s=SLOW_WORK_S), root, "slow", database, SLOW_SENDER_TIMEOUT_S) as spec:
        return passes(spec, root / "out", runs, experiments)


def _slow(root: Path, runs: int, experiments: tuple[str, ...]) -> tuple[int, list[str], float, str]:
    """The slow handler's `runs`, shard by shard: (passed, the first few that did not, seconds a run, where)."""
    counts = split(runs, SLOW_SHARDS)
    got = each(slow_shard, [(root / f"slow-{k}", n, experiments) for k, n in enumerate(counts)])
    wrong = [f"server {k + 1} {w}" for k, (_, missed, _) in enumerate(got) for w in missed]
    seconds = sum(s * n for (_, _, s), n in zip(got, counts, strict=True)) / runs
    where = (
        f"{len(counts)} servers and databases, {' and '.join(map(str, counts))} runs in a row on each, "
        f"{min(at_once(), len(counts))} at once (a process each)"
        if len(counts) > 1
        else "one server and database for all"
    )
    return sum(g for g, _, _ in got), wrong[:3], seconds, where


def reliability(quick: bool = False, piece: str | None = None) -> list[Figure]:
    """Each correct handler's share of passing runs; of one of `PIECES` only when `piece` names it."""
    # Quick: one run of one experiment each (what a test of this module can afford).
    runs, experiments = (1, ("lost-ack",)) if quick else (RUNS, ())
    root = Path(tempfile.mkdtemp(prefix="acklab-bench-handlers-"))
    previous = os.environ.get(SECRET_ENV)
    os.environ[SECRET_ENV] = SECRET
    server: PostgresServer | None = None

    def postgres() -> str:
        nonlocal server
        server = start_postgres()
        return server.create_database()

    def sqlite(name: str) -> str:
        return f"sqlite:///{root / name}.db"

    # label -> (handler, its database): one server here; the slow one's shards serve their own.
    served_here: dict[str, tuple[Variant, Callable[[], str]]] = {
        "receipt": (Receipt(), lambda: sqlite("r")),
        "serialized": (Serialized(), postgres),
    }
    names = {
        "receipt": "a correct receipt handler passes (SQLite)",
        "serialized": "a correct serialized handler passes (PostgreSQL)",
        # Its work, holding the claim, outlasts the sender's timeout (`slow_shard`).
        "slow": "a correct but slow handler passes behind a shorter sender timeout",
    }
    found = []
    try:
        for label in PIECES:
            if piece is not None and label != piece:
                continue
            if label == "slow":
                good, wrong, seconds, where = _slow(root, runs, experiments)
            else:
                variant, database = served_here[label]
                with served(variant, root, label, database()) as spec:
                    good, wrong, seconds = passes(spec, root / "out", runs, experiments)
                where = "one server and database for all"
            name = names[label]
            what = ", ".join(experiments) if experiments else "the default set"
            note = f"{good}/{runs} runs of {what} passed ({seconds:.1f} s a run), {where}"
            if wrong:
                note += "; " + "; ".join(wrong)
            found.append(
                Figure(
                    "handlers: " + name + (" (quick)" if quick else ""),
                    100.0 * good / runs,
                    "%",
                    target=None if quick else "== 100%",
                    met=None if quick else good == runs,
                    note=note,
                )
            )
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(root, ignore_errors=True)
        if previous is None:
            os.environ.pop(SECRET_ENV, None)
        else:
            os.environ[SECRET_ENV] = previous
    return found


if __name__ == "__main__":
    print_measured(reliability)
