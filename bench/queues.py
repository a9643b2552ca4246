"""Behind a queue: what the five queue experiments cost beside a default run, and the Celery twins'
verdicts over many runs.

* Cost: the Celery consumer keyed by the event id (`tests.consumers.queued_orders` with
  `tests.consumers.celery_orders`, ``acks_late``, a 2 s visibility timeout, two workers) attacked
  with the five queue experiments and with a default run (the six default experiments), the same
  trials each, the two alternating in one bench run; median wall time of each. Target: the queue
  experiments take at most twice the default run.
* Reliability: ``worker-crash-after-effect`` on the non-idempotent task fails, and on its twin keyed
  by the event id passes, 20 of 20 runs each.

``python -m bench.queues [--quick]`` prints the figures.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

from bench.figures import Figure, in_scratch, print_figure
from bench.runs import described, each, mismatches
from tests.consumers.queue_scenarios import QUEUE_EXPERIMENTS, keyed_orders, queued_orders
from tests.consumers.scenarios import DEFAULT_SET, SECRETS

RATIO_TARGET = 2.0
RUNS = 20
DEFAULT_TRIALS = 5  # acklab run's default --trials
CELERY = {"ACKLAB_TEST_VISIBILITY_S": "2"}


def _run(root: Path, label: str, experiments: tuple[str, ...], trials: int) -> tuple[float, list[str]]:
    tmp = root / label
    tmp.mkdir(parents=True)
    scenario = keyed_orders(tmp, "celery", experiments, workers=2, env=CELERY)
    started = time.perf_counter()
    result = scenario.run(tmp / "out", trials=trials)
    return time.perf_counter() - started, scenario.mismatches(result)


def cost_figure(quick: bool, root: Path) -> Figure:
    # Two rounds, each arm once per round in alternating order: a round is ~58 s (a Celery consumer
    # booted twice, 55 trials) and the ratio has been 1.49-1.77x against 2x; a third round was 58 s of
    # the bench's 20 minutes.
    rounds, trials = (1, 1) if quick else (2, DEFAULT_TRIALS)
    walls: dict[str, list[float]] = {"default": [], "queues": []}
    wrong: list[str] = []
    for n in range(rounds):
        order = [("default", DEFAULT_SET), ("queues", QUEUE_EXPERIMENTS)]
        for label, chosen in order if n % 2 == 0 else order[::-1]:
            wall, missed = _run(root, f"{label}-{n}", chosen, trials)
            walls[label].append(wall)
            wrong += missed
    value, baseline = statistics.median(walls["queues"]), statistics.median(walls["default"])
    ratio = value / baseline
    return Figure(
        "queues: the five queue experiments on Celery" + (" (quick)" if quick else ""),
        value,
        "s",
        baseline=baseline,
        ratio=ratio,
        target=None if quick else f"<= {RATIO_TARGET:g}x a default run",
        met=None if quick else ratio <= RATIO_TARGET and not wrong,
        note=f"median of {rounds}, {len(QUEUE_EXPERIMENTS)} experiments x {trials} trial(s), the Celery consumer keyed by "
        "the event id (acks_late, 2 s visibility timeout, 2 workers, the lab's Redis); baseline: a default run "
        f"({len(DEFAULT_SET)} experiments x {trials} trial(s)) of the same consumer, alternating"
        + (f"; WRONG VERDICTS: {wrong[:3]}" if wrong else ""),
    )


def crash_run(case: tuple[Path, str, str]) -> list[str]:
    """One run of ``worker-crash-after-effect`` on the task doing `effect`: how it differs from `verdict`."""
    tmp, effect, verdict = case
    tmp.mkdir(parents=True)
    scenario = queued_orders(
        tmp,
        "celery",
        ("worker-crash-after-effect",),
        {"worker-crash-after-effect": verdict},
        effect=effect,
        env=CELERY,
    )
    return mismatches(scenario, tmp / "out")


def reliability_figure(quick: bool, root: Path) -> Figure:
    runs = 1 if quick else RUNS
    cases = [
        (root / f"{effect}-{n}", effect, verdict)
        for n in range(runs)
        for effect, verdict in (("insert", "fail"), ("keyed", "pass"))
    ]
    missed = each(crash_run, cases)
    right = sum(not m for m in missed)
    wrong = [p for m in missed for p in m]
    return Figure(
        "queues: worker-crash-after-effect tells the Celery twins apart" + (" (quick)" if quick else ""),
        float(right),
        f"of {2 * runs} runs",
        target=None if quick else f"{2 * runs}/{2 * runs}",
        met=None if quick else right == 2 * runs,
        note=f"{runs} runs each of the non-idempotent task (fail) and its twin keyed by the event id (pass), "
        f"1 trial each, a fresh database and Redis each run; {described(len(cases))}"
        + (f"; WRONG VERDICTS: {wrong[:3]}" if wrong else ""),
    )


def figures(quick: bool = False) -> list[Figure]:
    """What the queue experiments cost beside a default run (it measures time: run alone)."""
    return in_scratch("acklab-bench-queues-", lambda root: [cost_figure(quick, root)], SECRETS)


def reliability(quick: bool = False) -> list[Figure]:
    """The Celery twins' verdicts over many runs (no figure here is a time)."""
    return in_scratch("acklab-bench-queues-", lambda root: [reliability_figure(quick, root)], SECRETS)


def main() -> None:
    quick = "--quick" in sys.argv[1:]
    for figure in [*figures(quick), *reliability(quick)]:
        print_figure(figure)


if __name__ == "__main__":
    main()
