"""``acklab.attack`` in a test's process: the six default experiments against the fixture's live handler.

What a pytest suite pays for ``webhook_lab.attack``: the fixture's app (``create_app``, live
handler, SQLite file) attacked with the six default experiments x 3 trials, counted through
its own effects endpoint, timed from the call to its return (preflight, every trial, the
final re-read and the written bundle included). In-process (``serving="auto"``: ASGI, no
socket, except where an experiment needs one) is the figure (target <= 2 s); the same
attack with every experiment served over a loopback socket (``serving="socket"``) is its
baseline, measured in the same run, alternating.

``python -m bench.in_process [--quick]`` prints the figures.
"""

from __future__ import annotations

import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import acklab
from acklab.app.main import create_app
from acklab.app.settings import Settings as FixtureSettings
from acklab.harness.targets.fixture import new_secret
from bench.figures import Figure, print_figure

BUDGET_S = 2.0
TRIALS = 3


def attack_once(root: Path, serving: str, trials: int) -> tuple[float, str, dict[str, float]]:
    """Wall seconds of one attack, its verdict, and trial seconds by experiment."""
    work = Path(tempfile.mkdtemp(dir=root))
    secret = new_secret()
    app = create_app(
        FixtureSettings(database_url=f"sqlite:///{work / 'fixture.db'}", handler="live", secret=secret)
    )
    started = time.perf_counter()
    result = acklab.attack(
        app,
        endpoint="/webhooks/orders",
        secret=secret,
        effects={"http": {"url": "/events/{{event_id}}/effects", "json_path": "count"}},
        trials=trials,
        out=work / "out",
        serving=serving,
    )
    wall = time.perf_counter() - started
    by_experiment: dict[str, float] = {}
    for trial in (result.bundle / "trials").glob("*.json"):
        doc = json.loads(trial.read_text())
        by_experiment[doc["experiment"]] = (
            by_experiment.get(doc["experiment"], 0.0) + doc["duration_ms"] / 1000
        )
    return wall, result.verdict, by_experiment


def figures(quick: bool = False) -> list[Figure]:
    rounds, trials = (1, 1) if quick else (5, TRIALS)
    root = Path(tempfile.mkdtemp(prefix="acklab-bench-inproc-"))
    inproc: list[float] = []
    socket: list[float] = []
    verdicts: set[str] = set()
    breakdown: dict[str, float] = {}
    try:
        attack_once(root, "auto", 1)  # warm-up: imports and first-request costs are not the figure
        for n in range(rounds):
            # Alternate which goes first, so a noisy neighbour hits both.
            order = ("auto", "socket") if n % 2 == 0 else ("socket", "auto")
            for serving in order:
                wall, verdict, by_experiment = attack_once(root, serving, trials)
                verdicts.add(verdict)
                (inproc if serving == "auto" else socket).append(wall)
                if serving == "auto":
                    for name, seconds in by_experiment.items():
                        breakdown[name] = breakdown.get(name, 0.0) + seconds / rounds
    finally:
        shutil.rmtree(root, ignore_errors=True)
    value, baseline = statistics.median(inproc), statistics.median(socket)
    parts = ", ".join(f"{n} {s:.2f} s" for n, s in sorted(breakdown.items(), key=lambda kv: -kv[1]))
    wrong = verdicts - {"pass"}
    note = (
        f"median of {rounds}, {trials} trial(s) per experiment; in-process runs {min(inproc):.2f}-"
        f"{max(inproc):.2f} s; trial time by experiment (in-process): {parts}"
    )
    if wrong:
        note += f"; WRONG VERDICT: {sorted(wrong)} (the live handler must pass)"
    return [
        Figure(
            "attack(): six default experiments x 3 trials, in-process" + (" (quick)" if quick else ""),
            value,
            "s",
            baseline=baseline,
            ratio=value / baseline,
            target=None if quick else f"<= {BUDGET_S:g} s",
            met=None if quick else value <= BUDGET_S and not wrong,
            note=note + "; baseline: the same attack with every experiment over a loopback socket",
        )
    ]


def main() -> None:
    for figure in figures(quick="--quick" in sys.argv[1:]):
        print_figure(figure)


if __name__ == "__main__":
    main()
