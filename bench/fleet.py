"""Beyond one process: what replicas and a shifted clock cost, and the unique key's verdicts over many runs.

* Replicas: the unique-key consumer (`tests.consumers.fleet_orders`, gunicorn, SQLite) attacked with
  a default run (the six default experiments, 5 trials each) as one process and as three replicas
  behind the lab's balancer, the two alternating, median wall time of each. Target: each replica
  beyond one adds <= 10 % to the run.
* The clock: the same consumer, `late-redelivery` (the consumer restarted once under libfaketime,
  its clock moved three days) against `lost-ack` (the same lost acknowledgement and retry, no shift),
  one trial each, alternating, median of each. Target: <= 2 s more.
* Reliability: the unique key passes the six default experiments and the four beyond one process,
  on two replicas, 20 of 20 runs.

``python -m bench.fleet [--quick]`` prints the figures.
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench.figures import Figure, print_figure
from tests.consumers.fleet_scenarios import FLEET, fleet_orders
from tests.consumers.scenarios import DEFAULT_SET, SECRETS

REPLICAS = 3
PER_REPLICA_TARGET = 0.10
CLOCK_TARGET_S = 2.0
RUNS = 20
DEFAULT_TRIALS = 5  # acklab run's default --trials


def _timed(root: Path, label: str, make: object, trials: int) -> tuple[float, list[str]]:
    scenario = make(root / label)  # type: ignore[operator]
    started = time.perf_counter()
    result = scenario.run(root / label / "out", trials=trials)
    return time.perf_counter() - started, scenario.mismatches(result)


def _alternating(
    root: Path, rounds: int, makers: dict[str, object], trials: int = 1
) -> tuple[dict[str, list[float]], list[str]]:
    walls: dict[str, list[float]] = {label: [] for label in makers}
    wrong: list[str] = []
    for n in range(rounds):
        order = list(makers.items())
        for label, make in order if n % 2 == 0 else order[::-1]:
            (root / f"{label}-{n}").mkdir(parents=True)
            wall, missed = _timed(root, f"{label}-{n}", make, trials)
            walls[label].append(wall)
            wrong += missed
    return walls, wrong


def replicas_figure(quick: bool, root: Path) -> Figure:
    rounds = 1 if quick else 5
    chosen = ("lost-ack",) if quick else DEFAULT_SET
    expected = dict.fromkeys(chosen, "pass")
    walls, wrong = _alternating(
        root,
        rounds,
        {
            "one": lambda tmp: fleet_orders(tmp, "unique", chosen, expected),
            "replicas": lambda tmp: fleet_orders(tmp, "unique", chosen, expected, replicas=REPLICAS),
        },
        trials=1 if quick else DEFAULT_TRIALS,
    )
    value, baseline = statistics.median(walls["replicas"]), statistics.median(walls["one"])
    per_replica = (value / baseline - 1) / (REPLICAS - 1)
    return Figure(
        f"fleet: a default run on {REPLICAS} replicas" + (" (quick)" if quick else ""),
        value,
        "s",
        baseline=baseline,
        ratio=value / baseline,
        target=None if quick else f"<= +{PER_REPLICA_TARGET:.0%} per replica beyond one",
        met=None if quick else per_replica <= PER_REPLICA_TARGET and not wrong,
        note=f"median of {rounds}, {len(chosen)} experiment(s) x {1 if quick else DEFAULT_TRIALS} trial(s), the unique-key consumer under gunicorn "
        f"(1 worker each); {per_replica:+.1%} per replica beyond one; baseline: the same spec as one process"
        + (f"; WRONG VERDICTS: {wrong[:3]}" if wrong else ""),
    )


def clock_figure(quick: bool, root: Path) -> Figure:
    rounds = 1 if quick else 5
    walls, wrong = _alternating(
        root,
        rounds,
        {
            "plain": lambda tmp: fleet_orders(tmp, "unique", ("lost-ack",), {"lost-ack": "pass"}),
            "late": lambda tmp: fleet_orders(
                tmp, "unique", ("late-redelivery",), {"late-redelivery": "pass"}
            ),
        },
    )
    value, baseline = statistics.median(walls["late"]), statistics.median(walls["plain"])
    extra = value - baseline
    return Figure(
        "fleet: a late redelivery on a shifted clock" + (" (quick)" if quick else ""),
        value,
        "s",
        baseline=baseline,
        ratio=value / baseline,
        target=None if quick else f"<= +{CLOCK_TARGET_S:g} s over a plain redelivery",
        met=None if quick else extra <= CLOCK_TARGET_S and not wrong,
        note=f"median of {rounds} runs of 1 trial each, +{extra:.2f} s: the consumer restarted once under "
        "libfaketime and its clock moved 3 days; baseline: lost-ack (the same lost ack and retry, no shift)"
        + (f"; WRONG VERDICTS: {wrong[:3]}" if wrong else ""),
    )


def reliability_figure(quick: bool, root: Path) -> Figure:
    runs = 1 if quick else RUNS
    chosen = (*DEFAULT_SET, *FLEET)
    passed = 0
    for n in range(runs):
        tmp = root / f"unique-{n}"
        tmp.mkdir(parents=True)
        scenario = fleet_orders(tmp, "unique", chosen, dict.fromkeys(chosen, "pass"), replicas=2)
        passed += not scenario.mismatches(scenario.run(tmp / "out"))
    return Figure(
        "fleet: a unique key passes every experiment on 2 replicas" + (" (quick)" if quick else ""),
        float(passed),
        f"of {runs} runs",
        target=None if quick else f"{runs}/{runs}",
        met=None if quick else passed == runs,
        note=f"{len(chosen)} experiments x 1 trial each run, a fresh database each run (SQLite)",
    )


def figures(quick: bool = False) -> list[Figure]:
    os.environ.update(SECRETS)
    root = Path(tempfile.mkdtemp(prefix="acklab-bench-fleet-"))
    try:
        return [replicas_figure(quick, root), clock_figure(quick, root), reliability_figure(quick, root)]
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    for figure in figures(quick="--quick" in sys.argv[1:]):
        print_figure(figure)


if __name__ == "__main__":
    main()
