"""Beyond one process: what replicas and a shifted clock cost, and the unique key's verdicts over many runs.

* Replicas: the unique-key consumer (`tests.consumers.fleet_orders`, gunicorn, SQLite) attacked with
  a default run (the six default experiments, 5 trials each) as one process and as three replicas
  behind the lab's balancer, the two alternating, median wall time of each. Target: each replica
  beyond one adds <= 10 % to the run — the whole run, the replicas' boot and stop included: a user
  pays them. The note splits each run where the cost goes (the experiments, timed by the run's own
  record, against loading, setup, boot and stop) and whose CPU it is (the lab's own against the
  consumer's processes), and the lab's own CPU is a figure of its own. In the same rounds a bare
  script, no lab, starts the same command once and three times at once, waits until each process
  answers and stops them: what the consumer's own processes cost this machine's cores, beside the
  same neighbours. The note gives that share of the per-replica figure and the rest apart.
* The clock: the same consumer, `late-redelivery` (the consumer restarted once under libfaketime,
  its clock moved three days) against `lost-ack` (the same lost acknowledgement and retry, no shift),
  one trial each, alternating, median of each. Target: <= 2 s more.
* Reliability: the unique key passes the six default experiments and the four beyond one process,
  on two replicas, 20 of 20 runs.

``python -m bench.fleet [--quick]`` prints the figures.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import resource
import shutil
import signal
import statistics
import subprocess  # nosec B404 - the benchmark's own consumer, as the lab starts it
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from acklab.harness.ports import free_port
from bench.figures import Figure, in_scratch, print_figure
from bench.runs import described, each, mismatches
from tests.consumers.fleet_scenarios import FLEET, fleet_orders, orders_argv, orders_env
from tests.consumers.scenarios import DEFAULT_SET, ROOT, SECRETS, Scenario

REPLICAS = 3
PER_REPLICA_TARGET = 0.10
CLOCK_TARGET_S = 2.0
RUNS = 20
DEFAULT_TRIALS = 5  # acklab run's default --trials
BARE_READY_S = 60.0  # the consumer's processes started without the lab: each must answer by then
BARE_POLL_S = 0.05  # as often as the lab polls a booting service (harness.procs.service_process.POLL_S)


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


# One arm of a comparison: given a fresh directory, what it took, and the verdicts it got wrong.
Arm = Callable[[Path], tuple[Timed, list[str]]]


def _run(make: Callable[[Path], Scenario], trials: int = 1) -> Arm:
    """A run of the lab against the scenario `make` builds, `trials` trials of each experiment."""

    def arm(where: Path) -> tuple[Timed, list[str]]:
        scenario = make(where)
        (lab, consumer), started = _cpu(), time.perf_counter()
        result = scenario.run(where / "out", trials=trials)
        wall, (lab_after, consumer_after) = time.perf_counter() - started, _cpu()
        run = result.run
        experiments = (
            datetime.fromisoformat(run["ended_at"]) - datetime.fromisoformat(run["started_at"])
        ).total_seconds()
        wrong = scenario.mismatches(result)
        return Timed(wall, experiments, lab_after - lab, consumer_after - consumer), wrong

    return arm


def _answers(port: int, deadline: float) -> None:
    """Wait until the process on `port` answers an HTTP request (any status), as the lab's readiness
    check does; a consumer that does not by `deadline` stops the benchmark."""
    while True:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=2.0)
        try:
            connection.request("GET", "/stripe")
            connection.getresponse().read()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"the consumer on port {port} did not answer within {BARE_READY_S:g} s without the lab"
                ) from None
        finally:
            connection.close()
        time.sleep(BARE_POLL_S)


def _bare(replicas: int) -> Arm:
    """The consumer's `replicas` processes without the lab: the spec's command, each on a port of its
    own, started at once, awaited until each answers, then SIGTERM to each group and awaited. What
    booting and stopping them costs this machine, with none of the lab's work around it."""

    def arm(where: Path) -> tuple[Timed, list[str]]:
        own = {k: v.replace("{{scratch}}", str(where)) for k, v in orders_env("unique").items()}
        env = {**os.environ, **own}
        ports: list[int] = []
        while len(ports) < replicas:
            if (port := free_port()) not in ports:
                ports.append(port)
        (lab, consumer), started = _cpu(), time.perf_counter()
        processes = [
            subprocess.Popen(  # nosec B603 - this interpreter, the benchmark's own consumer
                [arg.replace("{{port}}", str(port)) for arg in orders_argv()],
                cwd=ROOT,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
            for port in ports
        ]
        try:
            deadline = time.monotonic() + BARE_READY_S
            for port in ports:
                _answers(port, deadline)
        finally:
            for process in processes:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGTERM)
            for process in processes:
                try:
                    process.wait(BARE_READY_S)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait()
        wall, (lab_after, consumer_after) = time.perf_counter() - started, _cpu()
        return Timed(wall, 0.0, lab_after - lab, consumer_after - consumer), []

    return arm


def _alternating(root: Path, rounds: int, arms: dict[str, Arm]) -> tuple[dict[str, list[Timed]], list[str]]:
    runs: dict[str, list[Timed]] = {label: [] for label in arms}
    wrong: list[str] = []
    # Unmeasured: the first run in a process pays its imports and caches, which would otherwise
    # land on round 0's first arm (the baseline) and flatter the ratio.
    warm = root / f"warm-up-{'-'.join(arms)}"
    warm.mkdir(parents=True)
    _, wrong = next(iter(arms.values()))(warm)
    for n in range(rounds):
        order = list(arms.items())
        for label, arm in order if n % 2 == 0 else order[::-1]:
            where = root / f"{label}-{n}"
            where.mkdir(parents=True)
            timed, missed = arm(where)
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


def _each(one: list[Timed], many: list[Timed], part: str) -> float:
    """What each replica beyond one adds to `part` (medians of the two arms)."""
    return (_median(many, part) - _median(one, part)) / (REPLICAS - 1)


def replicas_figures(quick: bool, root: Path) -> list[Figure]:
    rounds = 1 if quick else 5
    chosen = ("lost-ack",) if quick else DEFAULT_SET
    expected = dict.fromkeys(chosen, "pass")
    trials = 1 if quick else DEFAULT_TRIALS
    load_before = os.getloadavg()[0]
    runs, wrong = _alternating(
        root,
        rounds,
        {
            "one": _run(lambda tmp: fleet_orders(tmp, "unique", chosen, expected), trials),
            "replicas": _run(
                lambda tmp: fleet_orders(tmp, "unique", chosen, expected, replicas=REPLICAS), trials
            ),
            # In the same rounds, so beside the same neighbours: the consumer's processes alone.
            "bare-one": _bare(1),
            "bare-replicas": _bare(REPLICAS),
        },
    )
    load_after = os.getloadavg()[0]
    one, many, bare_one, bare_many = (runs[k] for k in ("one", "replicas", "bare-one", "bare-replicas"))
    value, baseline = _median(many, "wall"), _median(one, "wall")
    per_replica = (value / baseline - 1) / (REPLICAS - 1)
    # The consumer's own processes, booted and stopped without the lab, in the target's unit.
    processes = _each(bare_one, bare_many, "wall") / baseline

    def split(part: str, unit: str = "s") -> str:
        return f"{_median(one, part):.2f} -> {_median(many, part):.2f} {unit}"

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
            note=f"median of {rounds}, {len(chosen)} experiment(s) x {trials} trial(s), the unique-key consumer "
            f"under gunicorn (1 worker each); {per_replica:+.1%} per replica beyond one; baseline: the same spec "
            f"as one process. The consumer's processes alone cost {processes:+.1%} per replica: the same "
            f"command started at once, awaited until each answered and stopped by a bare script (no lab) in the "
            f"same rounds took {_median(bare_one, 'wall'):.2f} -> {_median(bare_many, 'wall'):.2f} s; the "
            f"difference, {per_replica - processes:+.1%}, is the lab's launch, readiness checks, balancer and "
            f"stop, the experiments and noise (noise can make it negative). "
            f"Medians, one process -> {REPLICAS} replicas: the experiments "
            f"{split('experiments')}, the rest (spec, setup, the consumer's boot and stop) {rest_one:.2f} -> "
            f"{rest_many:.2f} s; CPU: the consumer's processes {split('consumer_cpu', 'CPU-s')} "
            f"({_each(one, many, 'consumer_cpu'):+.2f} CPU-s a replica; bare "
            f"{_each(bare_one, bare_many, 'consumer_cpu'):+.2f}), the lab's {split('lab_cpu', 'CPU-s')} "
            f"({_each(one, many, 'lab_cpu'):+.2f} CPU-s a replica); load average {load_before:.1f} -> "
            f"{load_after:.1f} on {os.cpu_count()} cores"
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
    rounds = 1 if quick else 3  # +0.68 s against a 2 s target: three rounds tell it
    runs, wrong = _alternating(
        root,
        rounds,
        {
            "plain": _run(lambda tmp: fleet_orders(tmp, "unique", ("lost-ack",), {"lost-ack": "pass"})),
            "late": _run(
                lambda tmp: fleet_orders(tmp, "unique", ("late-redelivery",), {"late-redelivery": "pass"})
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


RELIABLE = (*DEFAULT_SET, *FLEET)


def unique_run(tmp: Path) -> list[str]:
    """One run of the unique key on two replicas: how its verdicts differ from every experiment passing."""
    tmp.mkdir(parents=True)
    scenario = fleet_orders(tmp, "unique", RELIABLE, dict.fromkeys(RELIABLE, "pass"), replicas=2)
    return mismatches(scenario, tmp / "out")


def reliability_figure(quick: bool, root: Path) -> Figure:
    runs = 1 if quick else RUNS
    wrong = [m for m in each(unique_run, [root / f"unique-{n}" for n in range(runs)]) if m]
    passed = runs - len(wrong)
    return Figure(
        "fleet: a unique key passes every experiment on 2 replicas" + (" (quick)" if quick else ""),
        float(passed),
        f"of {runs} runs",
        target=None if quick else f"{runs}/{runs}",
        met=None if quick else passed == runs,
        note=f"{len(RELIABLE)} experiments x 1 trial each run, a fresh database each run (SQLite); {described(runs)}"
        + (f"; WRONG VERDICTS: {wrong[0][:3]}" if wrong else ""),
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
    return in_scratch("acklab-bench-fleet-", lambda root: [reliability_figure(quick, root)], SECRETS)


def main() -> None:
    quick = "--quick" in sys.argv[1:]
    for figure in [*figures(quick), *reliability(quick)]:
        print_figure(figure)


if __name__ == "__main__":
    main()
