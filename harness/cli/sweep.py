"""``acklab sweep``: the target x database x experiment matrix, with resume and a heatmap.

Each target on each database is one ordinary run (the runner's checkpoints, one file per
trial); the sweep adds ``sweep.json``, ``heatmap.svg`` and a manifest of kind "sweep" around
them (layout and resume: `harness.sweep.run`). Progress goes to stderr; ``--json`` prints
one object on stdout. Exit 0 when every cell passes, 1 when a handler failed (and no cell
is a lab error), 3 on bad input, 4 when the lab could not run a cell, 6 when interrupted
(resumable).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from acklab.evidence.documents.sweep import SweepDocument
from acklab.harness.cli.params import Finite
from acklab.harness.cli.progress import STYLE, ProgressDisplay, shown
from acklab.harness.core.plan import BOUNDS, RunSettings
from acklab.harness.core.run_events import ExperimentFinished, RunFinished, RunStarted, TrialFinished
from acklab.harness.experiments import EXPERIMENTS
from acklab.harness.sweep.matrix import TEMP_SQLITE, SweepRun
from acklab.harness.sweep.run import SweepOptions, SweepResult, run_sweep
from acklab.harness.wire.providers import DEFAULT_TIME_COMPRESSION

CONTEXT = {"help_option_names": ["-h", "--help"]}
LOG_WIDTH = 150
CELL_STYLE = {**STYLE, "skipped": "dim", "pending": "dim"}


def _console() -> Console:
    console = Console(stderr=True, highlight=False)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        # CI logs and pipes: rich assumes 80 columns and would squeeze the nine-column table
        console = Console(stderr=True, highlight=False, width=LOG_WIDTH)
    return console


class SweepProgress(ProgressDisplay):
    """The run display, told per cell: a bar per experiment on a terminal, a line per trial elsewhere."""

    bar_label = "  {task.description:<28}"

    def __init__(self, console: Console | None = None) -> None:
        super().__init__(console or _console())
        self._row = ""

    def starting(self, run: SweepRun, number: int, total: int) -> None:
        self._row = run.row
        self.console.print(
            f"[{number}/{total}] [bold]{shown(run.row)}[/]: {shown(', '.join(run.experiments))}"
            + (f" (resuming run {shown(run.run_id)})" if run.run_id else "")
        )

    def run_started(self, event: RunStarted) -> None:
        done = f", {event.trials_done} already done" if event.trials_done else ""
        self.console.print(f"  run {shown(event.run_id)}: {event.trials_total} trials{done}")

    def trial_line(self, event: TrialFinished) -> str:
        return f"  {shown(event.trial_id)}: [{STYLE.get(event.verdict, '')}]{shown(event.verdict)}[/]"

    def experiment_line(self, event: ExperimentFinished) -> str | None:
        return None

    def run_finished(self, event: RunFinished) -> None:
        self.console.print(
            f"  {shown(self._row)}: [{STYLE.get(event.verdict, '')}]{shown(event.verdict)}[/] ({shown(event.status)})"
        )


def per_cell(doc: SweepDocument) -> str:
    trials = doc.trials_per_experiment
    return f"{trials} trial{'s' if trials != 1 else ''} per cell"


def summary_table(doc: SweepDocument) -> Table:
    """One row per cell: verdict, pass rate and counts."""
    table = Table(title=f"sweep {shown(doc.sweep_id)}: {per_cell(doc)}", title_justify="left")
    for column in (
        "target",
        "database",
        "experiment",
        "verdict",
        "pass rate",
        "passed/trials",
        "failed",
        "errors",
        "violations",
    ):
        table.add_column(
            column,
            justify="right" if column[0] in "pfev" and column not in ("verdict", "experiment") else "left",
        )
    for cell in doc.cells:
        rate = cell.pass_rate
        table.add_row(
            shown(cell.target),
            shown(cell.database),
            shown(cell.experiment),
            f"[{CELL_STYLE.get(cell.verdict, '')}]{shown(cell.verdict)}[/]",
            f"{rate:.0%}" if rate is not None else "—",
            f"{cell.passed}/{cell.trials}",
            str(cell.failed),
            str(cell.errors),
            str(cell.violations),
        )
    return table


def report(result: SweepResult, console: Console) -> None:
    console.print(summary_table(result.doc))
    for cell in result.doc.cells:
        if cell.verdict in ("skipped", "error") and cell.reason:
            style = CELL_STYLE.get(cell.verdict, "")
            console.print(
                f"[{style}]{shown(cell.verdict)}[/] {shown(cell.target)} \u00b7 {shown(cell.database)} "
                f"\u00d7 {shown(cell.experiment)}: {shown(cell.reason)}"
            )
    console.print(
        f"verdict: [{STYLE.get(result.verdict, '')}]{shown(result.verdict)}[/]; sweep {shown(result.root)} "
        f"(heatmap {shown(result.root / 'heatmap.svg')})"
    )


@click.command("sweep", context_settings=CONTEXT)
@click.option(
    "--target",
    "targets",
    multiple=True,
    metavar="TARGET",
    help="Repeatable: fixture:live, fixture:unsafe, or a target spec file.",
)
@click.option(
    "--db",
    "databases",
    multiple=True,
    metavar="URL",
    help=f"Repeatable: fixture targets run once per database; '{TEMP_SQLITE}' is a temporary SQLite "
    "file (the default). Passwords are never written (user:***@).",
)
@click.option(
    "--experiment",
    "experiments",
    multiple=True,
    metavar="NAME",
    help=f"Repeatable; default: {', '.join(n for n, e in EXPERIMENTS.items() if e.default)}. "
    "One that cannot run on a target or database is a skipped cell.",
)
@click.option("--trials", type=click.IntRange(min=1), default=5, show_default=True, help="Trials per cell.")
@click.option(
    "--seed", type=int, default=None, help="Root seed; each run's seed derives from it. Default: random."
)
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("out"),
    show_default=True,
    help="Evidence directory; the sweep is <out>/<sweep_id>/.",
)
@click.option(
    "--resume", default=None, metavar="SWEEP_ID", help="Finish an interrupted sweep (same --out; --db again)."
)
@click.option("--json", "as_json", is_flag=True, help="Print the result as one JSON object on stdout.")
@click.option(
    "--svg",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Also write the heatmap to this file.",
)
@click.option("--allow-remote", is_flag=True, help="Allow a target endpoint off the loopback range.")
@click.option(
    "--time-compression",
    type=Finite(*BOUNDS["time_compression"]),
    default=DEFAULT_TIME_COMPRESSION,
    show_default=True,
    help="Retry schedules are divided by this factor (order and count kept).",
)
def sweep(**kwargs: Any) -> int:
    """Run the target x database x experiment matrix; per-cell verdicts and a heatmap."""
    options = SweepOptions(
        targets=tuple(kwargs["targets"]),
        databases=tuple(kwargs["databases"]),
        experiments=tuple(kwargs["experiments"]),
        trials=kwargs["trials"],
        seed=kwargs["seed"],
        out=kwargs["out"],
        resume=kwargs["resume"],
        allow_remote=kwargs["allow_remote"],
        settings=RunSettings(time_compression=kwargs["time_compression"]),
    )
    progress = SweepProgress()
    try:
        result = run_sweep(options, [progress], on_run=progress.starting)
    finally:
        progress.close()
    report(result, progress.console)
    if kwargs["svg"] is not None:
        kwargs["svg"].parent.mkdir(parents=True, exist_ok=True)
        kwargs["svg"].write_bytes((result.root / "heatmap.svg").read_bytes())
    if kwargs["as_json"]:
        click.echo(json.dumps(result.as_json()))
    return int(result.exit_code)
