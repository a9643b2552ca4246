"""``python -m bench``: run the benchmark suite and write ``bench/results.json``.

    python -m bench                      # every figure, then results.json
    python -m bench --quick              # a smaller variant of each (what a test can afford)
    python -m bench --only journal_writes --only full_run   # some modules; other figures kept
    python -m bench --make-test          # also time a real `make test` (slow; off by default)
    python -m bench --jobs 3             # how many modules' reliability figures run at once

Each module in `SUITE` has ``figures(quick: bool) -> list[Figure]``, the figures that measure
time, side by side with their baselines, and may have ``reliability(quick: bool)``, figures
that measure no time (how many of 20 runs got the right verdict). The timing figures run one
module at a time, nothing else of the bench beside them; then the reliability figures of
every module run in processes of their own, `--jobs` at a time (they wait on servers and
processes far more than they compute, and no figure of theirs is a duration). A module that
crashes is reported as not measured (with the error) and makes the exit status 1; a figure
that misses its target does not: the results say so, the table in docs/performance.md shows it.
"""

from __future__ import annotations

import argparse
import importlib
import json
import subprocess  # nosec B404 - the bench's own modules, run by this interpreter
import sys
import tempfile
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.figures import RESULTS, Figure, not_measured, print_figure, write_results

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
JOBS = 2  # reliability parts at once: two cores, each part mostly waiting on its servers
ROOT = Path(__file__).resolve().parent.parent  # where `python -m bench` finds bench/ and tests/


def run_module(name: str, *, quick: bool, part: str = "figures") -> tuple[list[Figure], bool]:
    """The module's `part` (``figures`` or ``reliability``), and whether it ran without crashing."""
    started = time.perf_counter()
    label = f"bench.{name}{'' if part == 'figures' else f' ({part})'}"
    print(f"== {label}{' (quick)' if quick else ''}", file=sys.stderr, flush=True)
    try:
        module = importlib.import_module(f"bench.{name}")
        measure = getattr(module, part, None)
        measured: list[Figure] = measure(quick=quick) if measure is not None else []
    except Exception as exc:  # one broken module must not hide the others' figures
        traceback.print_exc()
        return [not_measured(name, "", f"bench.{name} failed: {type(exc).__name__}: {exc}")], False
    finally:
        print(f"   {label}: {time.perf_counter() - started:.1f} s", file=sys.stderr, flush=True)
    return measured, True


def has(name: str, part: str) -> bool:
    """Whether module `name` has `part` (``figures``: what measures time; ``reliability``)."""
    return callable(getattr(importlib.import_module(f"bench.{name}"), part, None))


def run_apart(name: str, *, quick: bool) -> tuple[list[Figure], bool, str]:
    """The module's reliability figures, measured in a process of its own: (figures, ran, its output)."""
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
            capture_output=True,
            text=True,
            check=False,
        )
        try:
            found = [Figure(**f) for f in json.loads(out.read_text())]
        except (OSError, ValueError, TypeError) as exc:
            why = f"bench.{name} (reliability) exited {done.returncode} without figures ({exc})"
            return [not_measured(name, "", why)], False, done.stdout + done.stderr
    return found, done.returncode == 0, done.stdout + done.stderr


def _part(name: str, out: Path, quick: bool) -> int:
    """``--part NAME``: one module's reliability figures, written to `out` (run by `run_apart`)."""
    measured, ok = run_module(name, quick=quick, part="reliability")
    for figure in measured:
        print_figure(figure)
    out.write_text(json.dumps([asdict(f) for f in measured], allow_nan=False))
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
        "--jobs", type=int, default=JOBS, help=f"reliability parts run at once (default {JOBS})"
    )
    parser.add_argument("--part", choices=SUITE, help=argparse.SUPPRESS)
    return parser


def measure(chosen: list[str], *, quick: bool, jobs: int) -> tuple[dict[str, list[Figure]], list[str]]:
    """The chosen modules' figures, by module: what measures time one module at a time, then the
    reliability parts `jobs` at a time; and the modules that crashed."""
    crashed = []
    timed: dict[str, list[Figure]] = {}
    for name in (n for n in chosen if has(n, "figures")):  # what measures time runs alone
        measured, ok = run_module(name, quick=quick)
        timed[name] = measured
        if not ok:
            crashed.append(name)
        for figure in measured:
            print_figure(figure)
    apart = [name for name in chosen if has(name, "reliability")]
    counted: dict[str, list[Figure]] = {}
    if apart:
        print(f"== reliability of {', '.join(apart)}, {jobs} at a time", file=sys.stderr, flush=True)
        with ThreadPoolExecutor(max(1, jobs)) as pool:
            for name, (measured, ok, output) in zip(
                apart, pool.map(lambda n: run_apart(n, quick=quick), apart), strict=True
            ):
                sys.stderr.write(output)
                counted[name] = measured
                if not ok:
                    crashed.append(name)
    return {name: [*timed.get(name, []), *counted.get(name, [])] for name in chosen}, crashed


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.part:
        return _part(args.part, args.out, args.quick)
    if args.make_test:
        from bench.test_timing import time_make_test

        time_make_test()
    started = time.perf_counter()
    # A partial run (--only) refreshes its modules' figures and keeps the others.
    earlier, by_module = _earlier(args.out) if args.only else ({}, {})
    chosen = [name for name in SUITE if not args.only or name in args.only]
    measured, crashed = measure(chosen, quick=args.quick, jobs=args.jobs)
    by_module.update(measured)
    figures = [f for name in SUITE for f in by_module.get(name, [])]
    now = datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    elapsed = round(time.perf_counter() - started, 1)
    run: dict[str, Any] = {"generated_at": now, "quick": args.quick, "elapsed_s": elapsed}
    if earlier.get("figures"):
        # The whole-suite facts stay those of the run that measured most figures.
        run = {k: earlier[k] for k in ("generated_at", "quick", "elapsed_s") if k in earlier}
        update = {"modules": list(args.only), "at": now, "quick": args.quick, "elapsed_s": elapsed}
        run["updates"] = [*earlier.get("updates", []), update]
    if "test_timing" in chosen:  # where the suite's time went, from the same record
        from bench.test_timing import slowest_files

        run["slowest_files"] = slowest_files()
    elif earlier.get("slowest_files"):
        run["slowest_files"] = earlier["slowest_files"]
    write_results(
        figures,
        args.out,
        **run,
        suite={name: [f.name for f in by_module[name]] for name in SUITE if name in by_module},
    )
    print(f"wrote {args.out} ({len(figures)} figures)", file=sys.stderr)
    missed = [f.name for f in figures if f.met is False]
    if missed:
        print(f"missed their targets: {', '.join(missed)}", file=sys.stderr)
    if crashed:
        print(f"crashed: {', '.join(crashed)}", file=sys.stderr)
    return 1 if crashed else 0


if __name__ == "__main__":
    sys.exit(main())
