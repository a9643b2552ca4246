"""Beyond one process: what replicas and a shifted clock cost, and the unique key's verdicts over many runs.

* Replicas: the unique-key consumer (`tests.consumers.fleet_orders`, gunicorn, SQLite) attacked with
  a default run (the six default experiments, 5 trials each) as one process and as three replicas
  behind the lab's balancer, the two alternating, median wall time of each. Target: each replica
  beyond one adds <= 10 % to the run — the whole run, the replicas' boot and stop included: a user
  pays them. The note splits each run where the cost goes (the experiments, timed by the run's own
  record, against loading, setup, boot and stop) and whose CPU it is (the lab's own against the
  consumer's processes), and the lab's own CPU is a figure of its own: on a machine of two cores the
  extra replicas' interpreters booting is what a run on three costs more, not the lab's mechanics.
* The clock: the same consumer, `late-redelivery` (the consumer restarted once under libfaketime,
  its clock moved three days) against `lost-ack` (the same lost acknowledgement and retry, no shift),
  one trial each, alternating, median of each. Target: <= 2 s more.
* Reliability: the unique key passes the six default experiments and the four beyond one process,
  on two replicas, 20 of 20 runs.

``python -m bench.fleet [--quick]`` prints the figures.
"""

from __future__ import annotations

import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from bench.figures import Figure, print_figure
from tests.consumers.fleet_scenarios import FLEET, fleet_orders
from tests.consumers.scenarios import DEFAULT_SET, SECRETS

REPLICAS = 3
PER_REPLICA_TARGET = 0.10
CLOCK_TARGET_S = 2.0
RUNS = 20
DEFAULT_TRIALS = 5  # acklab run's default --trials


@dataclass(frozen=True)
class Timed:
    """One run: its wall time, the part its own record gives the experiments (``run.json``'s
    ``started_at`` to ``ended_at``: after the consumer is ready, before it is stopped), and the
    CPU of the lab's process and of the processes it started and reaped (setup, the consumer)."""

    wall: float
    experiments: float
    lab_cpu: float
    consumer_cpu: float


def _cpu() -> tuple[float, float]:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


def _timed(root: Path, label: str, make: object, trials: int) -> tuple[Timed, list[str]]:
    scenario = make(root / label)  # type: ignore[operator]
    (lab, consumer), started = _cpu(), time.perf_counter()
    result = scenario.run(root / label / "out", trials=trials)
    wall, (lab_after, consumer_after) = time.perf_counter() - started, _cpu()
    run = result.run
    experiments = (
        datetime.fromisoformat(run["ended_at"]) - datetime.fromisoformat(run["started_at"])
    ).total_seconds()
    return Timed(wall, experiments, lab_after - lab, consumer_after - consumer), scenario.mismatches(result)


def _alternating(
    root: Path, rounds: int, makers: dict[str, object], trials: int = 1
) -> tuple[dict[str, list[Timed]], list[str]]:
    runs: dict[str, list[Timed]] = {label: [] for label in makers}
    wrong: list[str] = []
    # Unmeasured: the first run in a process pays its imports and caches, which would otherwise
    # land on round 0's first arm (the baseline) and flatter the ratio.
    warm = f"warm-up-{'-'.join(makers)}"
    (root / warm).mkdir(parents=True)
    _, wrong = _timed(root, warm, next(iter(makers.values())), trials)
    for n in range(rounds):
        order = list(makers.items())
        for label, make in order if n % 2 == 0 else order[::-1]:
            (root / f"{label}-{n}").mkdir(parents=True)
            timed, missed = _timed(root, f"{label}-{n}", make, trials)
            runs[label].append(timed)
            wrong += missed
    return runs, wrong


def _median(runs: list[Timed], part: str) -> float:
    return statistics.median(float(getattr(run, part)) for run in runs)


def _against(
    name: str, quick: bool, measured: tuple[float, float], *, target: str, met: bool, note: str
) -> Figure:
    """A wall time in seconds beside its baseline; a quick variant has no target to meet."""
    value, baseline = measured
    return Figure(
        name + (" (quick)" if quick else ""),
        value,
        "s",
        baseline=baseline,
        ratio=value / baseline,
        target=None if quick else target,
        met=None if quick else met,
        note=note,
    )


def replicas_figures(quick: bool, root: Path) -> list[Figure]:
    rounds = 1 if quick else 5
    chosen = ("lost-ack",) if quick else DEFAULT_SET
    expected = dict.fromkeys(chosen, "pass")
    runs, wrong = _alternating(
        root,
        rounds,
        {
            "one": lambda tmp: fleet_orders(tmp, "unique", chosen, expected),
            "replicas": lambda tmp: fleet_orders(tmp, "unique", chosen, expected, replicas=REPLICAS),
        },
        trials=1 if quick else DEFAULT_TRIALS,
    )
    one, many = runs["one"], runs["replicas"]
    value, baseline = _median(many, "wall"), _median(one, "wall")
    per_replica = (value / baseline - 1) / (REPLICAS - 1)

    def split(part: str) -> str:
        return f"{_median(one, part):.2f} -> {_median(many, part):.2f} s"

    rest_one = statistics.median(r.wall - r.experiments for r in one)
    rest_many = statistics.median(r.wall - r.experiments for r in many)
    suffix = " (quick)" if quick else ""
    lab, lab_baseline = _median(many, "lab_cpu"), _median(one, "lab_cpu")
    return [
        _against(
            f"fleet: a default run on {REPLICAS} replicas",
            quick,
            (value, baseline),
            target=f"<= +{PER_REPLICA_TARGET:.0%} per replica beyond one",
            met=per_replica <= PER_REPLICA_TARGET and not wrong,
            note=f"median of {rounds}, {len(chosen)} experiment(s) x {1 if quick else DEFAULT_TRIALS} trial(s), "
            f"the unique-key consumer under gunicorn (1 worker each); {per_replica:+.1%} per replica beyond one; "
            f"baseline: the same spec as one process. Medians, one process -> {REPLICAS} replicas: the experiments "
            f"{split('experiments')}, the rest (spec, setup, the consumer's boot and stop) {rest_one:.2f} -> "
            f"{rest_many:.2f} s; CPU: the lab's {split('lab_cpu')}, the consumer's processes {split('consumer_cpu')}"
            + (f"; WRONG VERDICTS: {wrong[:3]}" if wrong else ""),
        ),
        Figure(
            f"fleet: the lab's own CPU in a default run on {REPLICAS} replicas{suffix}",
            lab,
            "CPU-s",
            baseline=lab_baseline,
            ratio=lab / lab_baseline,
            note="the same runs: CPU time of the lab's process (balancer, replicas started and awaited in "
            "parallel, deliveries, evidence); the consumer's own processes not counted; baseline: one process",
        ),
    ]


def clock_figure(quick: bool, root: Path) -> Figure:
    rounds = 1 if quick else 5
    runs, wrong = _alternating(
        root,
        rounds,
        {
            "plain": lambda tmp: fleet_orders(tmp, "unique", ("lost-ack",), {"lost-ack": "pass"}),
            "late": lambda tmp: fleet_orders(
                tmp, "unique", ("late-redelivery",), {"late-redelivery": "pass"}
            ),
        },
    )
    value, baseline = _median(runs["late"], "wall"), _median(runs["plain"], "wall")
    extra = value - baseline
    return _against(
        "fleet: a late redelivery on a shifted clock",
        quick,
        (value, baseline),
        target=f"<= +{CLOCK_TARGET_S:g} s over a plain redelivery",
        met=extra <= CLOCK_TARGET_S and not wrong,
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
    """What replicas and a shifted clock cost (they measure time: run alone)."""
    os.environ.update(SECRETS)
    root = Path(tempfile.mkdtemp(prefix="acklab-bench-fleet-"))
    try:
        return [*replicas_figures(quick, root), clock_figure(quick, root)]
    finally:
        shutil.rmtree(root, ignore_errors=True)


def reliability(quick: bool = False) -> list[Figure]:
    """The unique key's verdicts over many runs (no figure here is a time)."""
    os.environ.update(SECRETS)
    root = Path(tempfile.mkdtemp(prefix="acklab-bench-fleet-"))
    try:
        return [reliability_figure(quick, root)]
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    quick = "--quick" in sys.argv[1:]
    for figure in [*figures(quick), *reliability(quick)]:
        print_figure(figure)


if __name__ == "__main__":
    main()
