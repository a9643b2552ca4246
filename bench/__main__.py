"""``python -m bench``: run the benchmark suite and write ``bench/results.json``.

    python -m bench                      # every figure (a few minutes), then results.json
    python -m bench --quick              # a smaller variant of each (what a test can afford)
    python -m bench --only journal_writes --only full_run   # some modules; other figures kept
    python -m bench --make-test          # also time a real `make test` (slow; off by default)

Each module in `SUITE` has ``figures(quick: bool) -> list[Figure]`` and measures its
figures side by side with their baselines. A module that crashes is reported as not
measured (with the error) and makes the exit status 1; a figure that misses its target
does not: the results say so, the table in docs/performance.md shows it.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
import traceback
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
    "sinks",
    "provider_api",
    "fleet",
    "queues",
    "explorer",
    "console_scale",
    "hostile_inputs",
    "journal_writes",
    "flow_verify",
    "test_timing",
)


def run_module(name: str, *, quick: bool) -> tuple[list[Figure], bool]:
    """The module's figures, and whether it ran without crashing."""
    started = time.perf_counter()
    print(f"== bench.{name}{' (quick)' if quick else ''}", file=sys.stderr, flush=True)
    try:
        module = importlib.import_module(f"bench.{name}")
        measured: list[Figure] = module.figures(quick=quick)
    except Exception as exc:  # one broken module must not hide the others' figures
        traceback.print_exc()
        return [not_measured(name, "", f"bench.{name} failed: {type(exc).__name__}: {exc}")], False
    finally:
        print(f"   bench.{name}: {time.perf_counter() - started:.1f} s", file=sys.stderr, flush=True)
    return measured, True


def _earlier(path: Path) -> tuple[dict[str, Any], dict[str, list[Figure]]]:
    """An earlier results file, and its figures by the module that measured them."""
    if not path.exists():
        return {}, {}
    doc = json.loads(path.read_text())
    by_name = {f["name"]: Figure(**f) for f in doc.get("figures", [])}
    return doc, {
        module: [by_name[n] for n in names if n in by_name] for module, names in doc.get("suite", {}).items()
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="a smaller variant of every figure")
    parser.add_argument(
        "--only", action="append", choices=SUITE, metavar="MODULE", help=f"one of {', '.join(SUITE)}"
    )
    parser.add_argument("--out", type=Path, default=RESULTS, help=f"results file (default {RESULTS})")
    parser.add_argument(
        "--make-test", action="store_true", help="time a real `make test` first (slow; off by default)"
    )
    args = parser.parse_args(argv)
    if args.make_test:
        from bench.test_timing import time_make_test

        time_make_test()
    started = time.perf_counter()
    # A partial run (--only) refreshes its modules' figures and keeps the others.
    earlier, by_module = _earlier(args.out) if args.only else ({}, {})
    crashed = []
    for name in SUITE:
        if args.only and name not in args.only:
            continue
        measured, ok = run_module(name, quick=args.quick)
        by_module[name] = measured
        if not ok:
            crashed.append(name)
        for figure in measured:
            print_figure(figure)
    figures = [f for name in SUITE for f in by_module.get(name, [])]
    now = datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    elapsed = round(time.perf_counter() - started, 1)
    run: dict[str, Any] = {"generated_at": now, "quick": args.quick, "elapsed_s": elapsed}
    if earlier.get("figures"):
        # The whole-suite facts stay those of the run that measured most figures.
        run = {k: earlier[k] for k in ("generated_at", "quick", "elapsed_s") if k in earlier}
        update = {"modules": list(args.only), "at": now, "quick": args.quick, "elapsed_s": elapsed}
        run["updates"] = [*earlier.get("updates", []), update]
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
