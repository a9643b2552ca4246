"""The schedule explorer's time to find and shrink the check-then-insert race.

``acklab explore --target <spec> --budget 100 --seed S --json`` against a check-then-insert
handler whose only bug is the race (`bench.racy_handler`, a process of its own), as a
subprocess, for a few seeds: wall time to a shrunk counterexample (exit 1). Beside it,
in the same run and on the same handler, the scripted route to the same finding: ``acklab
run --experiment concurrent-duplicates --trials 1``.

``python -m bench.explorer [--quick]`` prints the figures.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.figures import Figure, not_measured, print_figure
from bench.full_run import acklab
from bench.racy_handler import RacyHandler

BUDGET = 100
NAME = "explorer: find + shrink the check-then-insert race"


def available() -> str | None:
    """None when `acklab explore` is there, else why not."""
    from acklab.cli import COMMANDS

    if "explore" not in COMMANDS:
        return "`acklab explore` is not built yet"
    try:
        __import__(COMMANDS["explore"][0].partition(":")[0])
    except ImportError as exc:
        return f"`acklab explore` does not import: {exc}"
    return None


def _timed(cmd: list[str], timeout_s: float = 600) -> tuple[float, int, dict[str, Any]]:
    started = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    wall = time.perf_counter() - started
    try:
        result = json.loads(done.stdout)
    except ValueError:
        result = {"stderr": done.stderr[-500:]}
    return wall, done.returncode, result


def figures(quick: bool = False) -> list[Figure]:
    why = available()
    if why:
        return [not_measured(NAME, "s", why)]
    seeds = (1,) if quick else (1, 2, 3)
    explored: list[tuple[float, int, dict[str, Any]]] = []
    scripted: list[float] = []
    with tempfile.TemporaryDirectory(prefix="acklab-bench-explore-") as tmp:
        root = Path(tmp)
        with RacyHandler(f"sqlite:///{root / 'racy.db'}", root / "racy.yaml", work_ms=5.0) as spec:
            for seed in seeds:
                out = str(root / f"out-{seed}")
                explored.append(
                    _timed(
                        [*acklab(), "explore", "--target", str(spec), "--budget", str(BUDGET),
                         "--seed", str(seed), "--out", out, "--json"]
                    )
                )  # fmt: skip
                wall, _, _ = _timed(
                    [*acklab(), "run", "--target", str(spec), "--experiment", "concurrent-duplicates",
                     "--trials", "1", "--seed", str(seed), "--out", out, "--json"]
                )  # fmt: skip
                scripted.append(wall)
    found = [(wall, result) for wall, code, result in explored if code == 1 and result.get("schedule")]
    if not found:
        codes = sorted({code for _, code, _ in explored})
        return [
            Figure(
                NAME,
                statistics.median(w for w, _, _ in explored),
                "s",
                baseline=statistics.median(scripted),
                met=None,
                note=f"found nothing within --budget {BUDGET} for seeds {list(seeds)} (exit {codes})",
            )
        ]
    wall = statistics.median(w for w, _ in found)
    base = statistics.median(scripted)
    shrunk = sorted({len(r["schedule"]) for _, r in found})
    examples = sorted(r.get("examples", 0) for _, r in found)
    steps = "; ".join(
        " ".join(f"{s.get('op', '?')}(event {s.get('event', '?')}, n={s.get('n', 1)})" for s in r["schedule"])
        for _, r in found[:1]
    )
    return [
        Figure(
            NAME,
            wall,
            "s",
            baseline=base,
            ratio=wall / base,
            note=(
                f"found in {len(found)}/{len(seeds)} seeds (median of those), --budget {BUDGET}, "
                f"examples {examples}; shrunk to {shrunk} step(s), e.g. {steps}; baseline: "
                "acklab run --experiment concurrent-duplicates --trials 1 on the same handler"
            ),
        )
    ]


def main() -> None:
    for figure in figures(quick="--quick" in sys.argv[1:]):
        print_figure(figure)


if __name__ == "__main__":
    main()
