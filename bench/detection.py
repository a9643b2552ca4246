"""How sharp `concurrent-duplicates` is: the share of trials that catch a check-then-insert race.

The handler is `bench.racy_handler.RacyCheckThenInsert` (the tests' check-then-insert
handler): it looks for the event, works for `WORK_MS`, then records it — no constraint, no
lock — served by uvicorn in a process of its own and judged as an external target through
a target spec file, on SQLite and
on a private PostgreSQL server (harness/procs/pgtemp.py). For every burst size the lab
runs `concurrent-duplicates` for N trials on a fresh database; a trial catches the race
when it records an at-most-once violation. Target: >= 95 % of trials at burst 16. The figures
are rates, not times: ``python -m bench`` counts them beside its other reliability parts.

``python -m bench.detection [--quick]`` prints the figures.
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from acklab.harness.core.plan import RunSettings
from acklab.harness.engine.runner import RunOptions, run
from acklab.harness.procs.pgtemp import start_postgres
from bench.figures import Figure, print_figure

BURSTS = (2, 4, 8, 16, 32)
TARGET_BURST = 16
TARGET_RATE = 0.95
WORK_MS = 5.0  # the handler's window between its check and its insert: a few ms, as real code has


def detection_rate(
    *, burst: int, trials: int, db_url: str, out: Path, work_ms: float = WORK_MS
) -> tuple[int, int]:
    """(trials that caught the race, trials run) for one burst size on a fresh database at `db_url`."""
    from bench.racy_handler import RacyHandler

    with RacyHandler(db_url, out / f"burst-{burst}.yaml", work_ms=work_ms) as spec:
        result = run(
            RunOptions(
                target=str(spec),
                experiments=("concurrent-duplicates",),
                trials=trials,
                out=out / "evidence",
                journal=False,
                settings=RunSettings(burst=burst),
            )
        )
    (entry,) = result.document.experiments
    caught = {v.trial for v in entry.violations if v.invariant == "at-most-once-effect"}
    return len(caught), entry.trials


@contextmanager
def sqlite_databases(root: Path) -> Iterator[Callable[[str], str]]:
    yield lambda name: f"sqlite:///{root / name}.db"


@contextmanager
def postgres_databases() -> Iterator[Callable[[str], str]]:
    server = start_postgres()
    try:
        yield lambda name: server.create_database(f"bench_{name}".replace("-", "_"))
    finally:
        server.stop()


def reliability(quick: bool = False) -> list[Figure]:
    """Rates, no time: `python -m bench` runs them beside its other reliability parts."""
    bursts, trials = ((2, TARGET_BURST), 5) if quick else (BURSTS, 20)
    # The burst with a target gets twice the trials: 1 miss in 20 is 95 %, 2 is already 90 %.
    trials_at = {TARGET_BURST: trials if quick else 2 * trials}
    found: list[Figure] = []
    with tempfile.TemporaryDirectory(prefix="acklab-bench-detect-") as tmp:
        root = Path(tmp)
        for label, databases in (("SQLite", sqlite_databases(root)), ("PostgreSQL", postgres_databases())):
            with databases as fresh:
                for burst in bursts:
                    caught, total = detection_rate(
                        burst=burst,
                        trials=trials_at.get(burst, trials),
                        db_url=fresh(f"b{burst}"),
                        out=root / f"{label}-{burst}",
                    )
                    rate = caught / total
                    at_target = burst == TARGET_BURST and not quick
                    found.append(
                        Figure(
                            f"concurrent-duplicates detection, {label}, burst {burst}",
                            rate * 100,
                            "%",
                            target=f">= {TARGET_RATE:.0%}" if at_target else None,
                            met=rate >= TARGET_RATE if at_target else None,
                            note=f"{caught}/{total} trials caught the race (window {WORK_MS:g} ms)",
                        )
                    )
    return found


def main() -> None:
    for figure in reliability(quick="--quick" in sys.argv[1:]):
        print_figure(figure)


if __name__ == "__main__":
    main()
