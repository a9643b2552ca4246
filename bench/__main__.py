"""``python -m bench``: run the benchmark suite and write ``bench/results.json``.

    python -m bench                      # every figure, then results.json
    python -m bench --quick              # a smaller variant of each (what a test can afford)
    python -m bench --only journal_writes --only full_run   # some modules; other figures kept
    python -m bench --make-test          # also time a real `make test` (slow; off by default)
    python -m bench --jobs 3             # how many modules' reliability figures run at once
    python -m bench --runs-at-once 4     # how many runs of one reliability figure run at once

Each module in `SUITE` has ``figures(quick: bool) -> list[Figure]``, the figures that measure
time, side by side with their baselines, and may have ``reliability(quick: bool)``, figures
that measure no time (how many of 20 runs got the right verdict). The timing figures run one
module at a time, nothing else of the bench beside them; then the reliability figures of
every module run in processes of their own, `--jobs` at a time, the one that took longest last
time first (they wait on servers and processes far more than they compute, and no figure of
theirs is a duration); inside one, the runs of a figure run `--runs-at-once` at a time, each in
a process of its own (`bench.runs`). The bench prints and records (``timings`` in the results)
its own wall time and each module's, figures and reliability apart. A module that
crashes is reported as not measured (with the error) and makes the exit status 1; a figure
that misses its target does not: the results say so, the table in docs/performance.md shows it.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import resource
import subprocess  # nosec B404 - the bench's own modules, run by this interpreter
import sys
import tempfile
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.figures import RESULTS, Figure, not_measured, print_figure, write_results
from bench.runs import ENV as RUNS_ENV

# In the order they run (and appear in docs/performance.md): cheapest last, so a quick look at the
# head of the output tells the important story first.
SUITE = (
    "harness_throughput",
    "full_run",
    "in_process",
    "detection",
    "race_sharpness",
    "verdict_trust",
    "beyond_one_event",
    "sinks",
    "provider_api",
    "fleet",
    "queues",
    "explorer",
    "console_scale",
    "hostile_inputs",
    "journal_writes",
    "flow_verify",
    "external_handlers",
    "test_timing",
)
JOBS = 5  # reliability parts at once: each mostly waits on its servers and processes (the phase,
# 14 parts: 571 s at three, 416 s at five, 712-718 CPU-s either way on two cores)
RUNS_AT_ONCE = 3  # runs of one reliability figure at once (bench.runs), in each part
BUDGET_MIN = 20.0  # the whole of `make bench` on a slow 2-core machine
WALL = "bench"  # the results' own entry: the bench's wall time, from a run of every module
ROOT = Path(__file__).resolve().parent.parent  # where `python -m bench` finds bench/ and tests/


def machine_busy_s() -> float | None:
    """CPU-seconds the whole machine has spent busy since it booted, every core and every process
    (``/proc/stat``: all but idle and waiting on I/O), or None where there is no ``/proc/stat``.
    The difference over a phase, against its wall time times the cores, says whether the phase
    waited or was bound by the cores."""
    try:
        first = Path("/proc/stat").read_text().split("\n", 1)[0].split()
        ticks = [int(t) for t in first[1:9]]  # user nice system idle iowait irq softirq steal
    except (OSError, ValueError):
        return None
    if first[0] != "cpu" or len(ticks) < 5:
        return None
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


def own_cpu_s() -> float:
    """CPU-seconds of this process and of every process it started and waited for (a PostgreSQL
    server its ``pg_ctl`` detached is not one of them)."""
    mine, theirs = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return mine.ru_utime + mine.ru_stime + theirs.ru_utime + theirs.ru_stime


def run_module(
    name: str, *, quick: bool, part: str = "figures", piece: str | None = None
) -> tuple[list[Figure], bool]:
    """The module's `part` (``figures`` or ``reliability``; of its reliability only `piece`, one
    of its ``PIECES``, when given), and whether it ran without crashing."""
    started = time.perf_counter()
    what = part + (f": {piece}" if piece else "")
    label = f"bench.{name}" + ("" if part == "figures" else f" ({what})")
    print(f"== {label}{' (quick)' if quick else ''}", file=sys.stderr, flush=True)
    try:
        module = importlib.import_module(f"bench.{name}")
        measure = getattr(module, part, None)
        keywords = {"piece": piece} if piece else {}
        measured: list[Figure] = measure(quick=quick, **keywords) if measure is not None else []
    except Exception as exc:  # one broken module must not hide the others' figures
        traceback.print_exc()
        return [not_measured(name, "", f"bench.{name} failed: {type(exc).__name__}: {exc}")], False
    finally:
        print(f"   {label}: {time.perf_counter() - started:.1f} s", file=sys.stderr, flush=True)
    return measured, True


def has(name: str, part: str) -> bool:
    """Whether module `name` has `part` (``figures``: what measures time; ``reliability``)."""
    return callable(getattr(importlib.import_module(f"bench.{name}"), part, None))


def pieces(name: str) -> list[str]:
    """The reliability parts of module `name`: ``name:piece`` for each of its ``PIECES`` (figures
    apart from each other, each part a process of its own), else the module whole."""
    found = getattr(importlib.import_module(f"bench.{name}"), "PIECES", ())
    return [f"{name}:{piece}" for piece in found] or [name]


@dataclass(frozen=True)
class Apart:
    """A reliability part measured in a process of its own: its figures, whether it ran without
    crashing, its output, its wall time and its CPU time (`own_cpu_s` of its process; None when it
    wrote no figures)."""

    figures: list[Figure]
    ran: bool
    output: str
    seconds: float
    cpu_s: float | None = None


def run_apart(name: str, *, quick: bool, runs_at_once: int = 1) -> Apart:
    """The module's reliability figures, measured in a process of its own."""
    started = time.perf_counter()
    env = {**os.environ, RUNS_ENV: str(runs_at_once)}
    with tempfile.TemporaryDirectory(prefix="acklab-bench-part-") as tmp:
        out = Path(tmp) / "figures.json"
        done = subprocess.run(  # nosec B603 - this interpreter, the bench's own module
            [
                sys.executable,
                "-m",
                "bench",
                "--part",
                name,
                "--out",
                str(out),
                *(["--quick"] if quick else []),
            ],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        elapsed = time.perf_counter() - started
        output = done.stdout + done.stderr
        try:
            written = json.loads(out.read_text())
            found = [Figure(**f) for f in written["figures"]]
            cpu_s = float(written["cpu_s"])
        except (OSError, ValueError, TypeError, KeyError) as exc:
            why = f"bench.{name} (reliability) exited {done.returncode} without figures ({exc!r})"
            return Apart([not_measured(name, "", why)], False, output, elapsed)
    return Apart(found, done.returncode == 0, output, elapsed, cpu_s)


def _part(task: str, out: Path, quick: bool) -> int:
    """``--part MODULE[:PIECE]``: one module's reliability figures (or one piece's), written to `out`
    (run by `run_apart`)."""
    name, _, piece = task.partition(":")
    if name not in SUITE or (piece and f"{name}:{piece}" not in pieces(name)):
        print(f"python -m bench: --part {task}: no such module or piece; one of {SUITE}", file=sys.stderr)
        return 2
    measured, ok = run_module(name, quick=quick, part="reliability", piece=piece or None)
    for figure in measured:
        print_figure(figure)
    written = {"figures": [asdict(f) for f in measured], "cpu_s": round(own_cpu_s(), 1)}
    out.write_text(json.dumps(written, allow_nan=False))
    return 0 if ok else 1


def _earlier(path: Path) -> tuple[dict[str, Any], dict[str, list[Figure]]]:
    """An earlier results file, and its figures by the module that measured them."""
    if not path.exists():
        return {}, {}
    doc = json.loads(path.read_text())
    by_name = {f["name"]: Figure(**f) for f in doc.get("figures", [])}
    return doc, {
        module: [by_name[n] for n in names if n in by_name] for module, names in doc.get("suite", {}).items()
    }


def _at_least_one(raw: str) -> int:
    try:
        n = int(raw)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"got {raw!r}; expected a whole number, at least 1 (e.g. 3)")
    return n


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="a smaller variant of every figure")
    parser.add_argument(
        "--only", action="append", choices=SUITE, metavar="MODULE", help=f"one of {', '.join(SUITE)}"
    )
    parser.add_argument("--out", type=Path, default=RESULTS, help=f"results file (default {RESULTS})")
    parser.add_argument(
        "--make-test", action="store_true", help="time a real `make test` first (slow; off by default)"
    )
    parser.add_argument(
        "--jobs", type=_at_least_one, default=JOBS, help=f"reliability parts run at once (default {JOBS})"
    )
    parser.add_argument(
        "--runs-at-once",
        type=_at_least_one,
        default=RUNS_AT_ONCE,
        help=f"runs of one reliability figure at once, each in a process of its own (default {RUNS_AT_ONCE})",
    )
    parser.add_argument("--part", help=argparse.SUPPRESS)
    return parser


@dataclass
class Measured:
    """What `measure` found: figures by module, the modules that crashed, seconds per module and
    part (``figures``: one module at a time; ``reliability``: `jobs` parts at a time), each
    reliability part's CPU-seconds (`own_cpu_s`), and each phase's `busy` share: the machine's
    busy CPU-seconds over its wall time times the cores (`machine_busy_s`; absent where unknown)."""

    by_module: dict[str, list[Figure]]
    crashed: list[str]
    seconds: dict[str, dict[str, float]] = field(default_factory=lambda: {"figures": {}, "reliability": {}})
    cpu_s: dict[str, float] = field(default_factory=dict)
    busy: dict[str, float] = field(default_factory=dict)

    def phase(
        self,
        name: str,
        started: tuple[float, float | None],
        ended: tuple[float, float | None] | None = None,
        cores: int | None = None,
    ) -> None:
        """Record how busy the machine's `cores` were in phase `name`, from `started` to `ended`
        (`phase_start` of each; the end is now unless given)."""
        (began, busy), (now, busy_now) = started, ended or phase_start()
        cores, elapsed = cores or os.cpu_count() or 1, now - began
        if busy is not None and busy_now is not None and elapsed > 0:
            self.busy[name] = round(min(1.0, (busy_now - busy) / (elapsed * cores)), 3)


def phase_start() -> tuple[float, float | None]:
    """When a phase begins: the wall clock and the machine's busy CPU-seconds (`Measured.phase`)."""
    return time.perf_counter(), machine_busy_s()


def longest_first(names: list[str], earlier: dict[str, float]) -> list[str]:
    """`names` with those that took longest last time first (the phase ends with its longest part
    otherwise); those never timed keep their order, ahead of the timed ones."""
    return sorted(names, key=lambda n: -earlier.get(n, float("inf")))


def measure(
    chosen: list[str],
    *,
    quick: bool,
    jobs: int,
    runs_at_once: int = 1,
    earlier: dict[str, float] | None = None,
) -> Measured:
    """The chosen modules' figures, by module: what measures time one module at a time, then the
    reliability parts `jobs` at a time (longest first, by `earlier` seconds); and the modules that crashed."""
    found = Measured({}, [])
    timed: dict[str, list[Figure]] = {}
    began = phase_start()
    for name in (n for n in chosen if has(n, "figures")):  # what measures time runs alone
        started = time.perf_counter()
        measured, ok = run_module(name, quick=quick)
        found.seconds["figures"][name] = round(time.perf_counter() - started, 1)
        timed[name] = measured
        if not ok:
            found.crashed.append(name)
        for figure in measured:
            print_figure(figure)
    found.phase("figures", began)
    apart = longest_first(
        [task for name in chosen if has(name, "reliability") for task in pieces(name)], earlier or {}
    )
    counted: dict[str, list[Figure]] = {}
    if apart:
        print(
            f"== reliability of {', '.join(apart)}, {jobs} at a time, {runs_at_once} run(s) of a figure at once",
            file=sys.stderr,
            flush=True,
        )
        began = phase_start()
        with ThreadPoolExecutor(max(1, jobs)) as pool:
            parts = pool.map(lambda n: run_apart(n, quick=quick, runs_at_once=runs_at_once), apart)
            for task, part in zip(apart, parts, strict=True):
                sys.stderr.write(part.output)
                counted[task] = part.figures
                found.seconds["reliability"][task] = round(part.seconds, 1)
                if part.cpu_s is not None:
                    found.cpu_s[task] = part.cpu_s
                if not part.ran:
                    found.crashed.append(task)
        found.phase("reliability", began)
    found.by_module = {
        name: [*timed.get(name, []), *(f for task in pieces(name) for f in counted.get(task, []))]
        for name in chosen
    }
    return found


def wall_figure(elapsed_s: float, found: Measured, *, quick: bool, jobs: int, runs_at_once: int) -> Figure:
    """The whole bench's own wall time, against its budget (a quick run has none to meet)."""
    figures_s, reliability_s = (sum(found.seconds[p].values()) for p in ("figures", "reliability"))
    phase_s = elapsed_s - figures_s
    minutes = elapsed_s / 60
    return Figure(
        "make bench wall time" + (" (quick)" if quick else ""),
        round(minutes, 2),
        "min",
        target=None if quick else f"<= {BUDGET_MIN:g} min",
        met=None if quick else minutes <= BUDGET_MIN and not found.crashed,
        note=f"python -m bench, every module: the timing figures {figures_s / 60:.1f} min (one module at a time, "
        f"nothing beside them), then the reliability parts {phase_s / 60:.1f} min ({jobs} at a time, "
        f"{runs_at_once} run(s) of a figure at once; {reliability_s / 60:.1f} min of parts added up); "
        "each module's seconds are in results.json's timings",
    )


def print_times(found: Measured, elapsed_s: float) -> None:
    """Where the bench's time went, module by module (stderr)."""
    print(f"== python -m bench took {elapsed_s:.0f} s ({elapsed_s / 60:.1f} min)", file=sys.stderr)
    for part, seconds in found.seconds.items():
        if part in found.busy:
            print(f"   {part}: the machine's cores {found.busy[part]:.0%} busy", file=sys.stderr)
        for name, s in sorted(seconds.items(), key=lambda kv: -kv[1]):
            cpu = f" {found.cpu_s[name]:7.1f} CPU-s" if part == "reliability" and name in found.cpu_s else ""
            print(f"   {part:<11} {name:<20} {s:7.1f} s{cpu}", file=sys.stderr)


def _timings(
    earlier: dict[str, Any], found: Measured, args: argparse.Namespace, elapsed: float
) -> dict[str, Any]:
    """results.json's ``timings``: each part's seconds (a partial run refreshes its modules' own)."""
    before = earlier.get("timings", {})
    merged: dict[str, Any] = {
        part: {**before.get(part, {}), **found.seconds[part]} for part in ("figures", "reliability")
    }
    merged["jobs"], merged["runs_at_once"] = args.jobs, args.runs_at_once
    merged["reliability_cpu_s"] = {**before.get("reliability_cpu_s", {}), **found.cpu_s}
    # How busy the machine was in each phase: of the whole run's (a partial run's are of its modules).
    if not args.only and found.busy:
        merged["busy"] = found.busy
    elif "busy" in before:
        merged["busy"] = before["busy"]
    if not args.only:
        merged["total_s"] = elapsed
    elif "total_s" in before:
        merged["total_s"] = before["total_s"]
    return merged


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.part:
        return _part(args.part, args.out, args.quick)
    if args.make_test:
        from bench.test_timing import time_make_test

        time_make_test()
    started = time.perf_counter()
    # A partial run (--only) refreshes its modules' figures and keeps the others.
    previous, kept = _earlier(args.out)
    earlier, by_module = (previous, kept) if args.only else ({}, {})
    chosen = [name for name in SUITE if not args.only or name in args.only]
    # Which reliability part took longest last time: from the results file, even for a whole run.
    last = previous.get("timings", {}).get("reliability", {})
    found = measure(chosen, quick=args.quick, jobs=args.jobs, runs_at_once=args.runs_at_once, earlier=last)
    by_module.update(found.by_module)
    elapsed = round(time.perf_counter() - started, 1)
    if not args.only:  # the bench's own time, beside the figures it measured
        by_module[WALL] = [
            wall_figure(elapsed, found, quick=args.quick, jobs=args.jobs, runs_at_once=args.runs_at_once)
        ]
    figures = [f for name in (*SUITE, WALL) for f in by_module.get(name, [])]
    now = datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    run: dict[str, Any] = {"generated_at": now, "quick": args.quick, "elapsed_s": elapsed}
    if earlier.get("figures"):
        # The whole-suite facts stay those of the run that measured most figures.
        run = {k: earlier[k] for k in ("generated_at", "quick", "elapsed_s") if k in earlier}
        update = {"modules": list(args.only), "at": now, "quick": args.quick, "elapsed_s": elapsed}
        run["updates"] = [*earlier.get("updates", []), update]
    run["timings"] = _timings(earlier, found, args, elapsed)
    if "test_timing" in chosen:  # where the suite's time went, from the same record
        from bench.test_timing import file_walls, slowest_files

        run["slowest_files"], run["file_walls"] = slowest_files(), file_walls()
    else:
        run |= {key: earlier[key] for key in ("slowest_files", "file_walls") if earlier.get(key)}
    write_results(
        figures,
        args.out,
        **run,
        suite={name: [f.name for f in by_module[name]] for name in (*SUITE, WALL) if name in by_module},
    )
    print_times(found, elapsed)
    print(f"wrote {args.out} ({len(figures)} figures)", file=sys.stderr)
    missed = [f.name for f in figures if f.met is False]
    if missed:
        print(f"missed their targets: {', '.join(missed)}", file=sys.stderr)
    if found.crashed:
        print(f"crashed: {', '.join(found.crashed)}", file=sys.stderr)
    return 1 if found.crashed else 0


if __name__ == "__main__":
    sys.exit(main())
