"""The live progress display on stderr (rich), and the summary table at the end.

On a terminal: a progress bar per experiment. Elsewhere (CI logs, pipes): one plain
line per finished trial, so a log reads like a transcript.
"""

from __future__ import annotations

import os

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table

from acklab.evidence.documents.records import observed_text
from acklab.evidence.documents.run import RunDocument
from acklab.evidence.history import printable
from acklab.evidence.redaction import known
from acklab.harness.core.run_events import (
    ExperimentFinished,
    ExperimentStarted,
    RunEvent,
    RunFinished,
    RunStarted,
    TrialFinished,
)

# verdict -> rich style
STYLE = dict(
    zip(("pass", "fail", "error", "skipped"), ("green", "bold red", "bold yellow", "dim"), strict=True)
)


# Output that is not a terminal (a CI log, a pipe, a file) is a transcript: never wrapped.
# rich assumes 80 columns there and would cut "lost-ack-reset" into "lost-ack-res…".
LOG_WIDTH = 1000


def output_console(*, stderr: bool = True) -> Console:
    """A rich console for the lab's output: the terminal's width on a terminal, else unwrapped
    (`LOG_WIDTH`, unless ``COLUMNS`` says otherwise)."""
    console = Console(stderr=stderr, highlight=False)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console = Console(stderr=stderr, highlight=False, width=LOG_WIDTH, soft_wrap=True)
    return console


def shown(value: object) -> str:
    """Data for a rich console: markup escaped, control characters visible.

    A target's name, an error a target caused (an effects endpoint's answer, quoted), a path:
    rich would read ``[/]`` as markup (and raise) and a terminal would obey an escape sequence.
    """
    return escape(printable(str(value)))


class ProgressDisplay:
    """Consumes run events; draws progress while the run goes, a table when it ends.

    Subclasses (the sweep's display) change what is said at the start and end of a run and
    for a finished trial in a log; the bars and the event handling stay here.
    """

    bar_label = "{task.description:<24}"

    def __init__(self, console: Console | None = None) -> None:
        self.console = console or output_console()
        self._live = self.console.is_terminal
        self._progress: Progress | None = None
        self._tasks: dict[str, TaskID] = {}

    def run_started(self, event: RunStarted) -> None:
        resumed = f", {event.trials_done} already done" if event.trials_done else ""
        self.console.print(
            f"acklab run [bold]{shown(event.run_id)}[/] on [bold]{shown(event.target)}[/]: "
            f"{event.trials_total} trials{resumed} -> {shown(event.bundle)}"
        )

    def trial_line(self, event: TrialFinished) -> str:
        """What a log (no terminal) says for one finished trial."""
        return f"  trial {shown(event.trial_id)}: {shown(event.verdict)}"

    def experiment_line(self, event: ExperimentFinished) -> str | None:
        """What a log says when an experiment ends (None: nothing)."""
        return f"experiment {shown(event.name)}: {shown(event.verdict)} ({event.violations} violations)"

    def run_finished(self, event: RunFinished) -> None:
        if event.run is not None:
            self.console.print(summary_table(event.run))
            for line in spread_lines(event.run):
                self.console.print(line)
            for warning in event.run.warnings or ():
                self.console.print(f"[yellow]warning:[/] {shown(known().text(warning))}")
        self.console.print(
            f"verdict: [{STYLE.get(event.verdict, '')}]{shown(event.verdict)}[/] ({shown(event.status)}); "
            f"bundle {shown(event.bundle)}"
        )

    def handle(self, event: RunEvent) -> None:
        if isinstance(event, RunStarted):
            self.run_started(event)
            if self._live:
                self._progress = Progress(
                    TextColumn(self.bar_label),
                    BarColumn(),
                    MofNCompleteColumn(),
                    TextColumn("{task.fields[last]}"),
                    TimeElapsedColumn(),
                    console=self.console,
                    transient=True,
                )
                self._progress.start()
        elif isinstance(event, ExperimentStarted) and self._progress is not None:
            self._tasks[event.name] = self._progress.add_task(
                event.name, total=event.trials, completed=event.done, last=""
            )
        elif isinstance(event, TrialFinished):
            if self._progress is not None and event.experiment in self._tasks:
                style = STYLE.get(event.verdict, "")
                self._progress.update(
                    self._tasks[event.experiment], advance=1, last=f"[{style}]{event.verdict}[/]"
                )
            elif not self._live:
                self.console.print(self.trial_line(event))
        elif isinstance(event, ExperimentFinished) and not self._live:
            line = self.experiment_line(event)
            if line is not None:
                self.console.print(line)
        elif isinstance(event, RunFinished):
            self.close()
            self.run_finished(event)

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
        self._tasks.clear()


def summary_table(run: RunDocument) -> Table:
    """The run's experiments, one row each: verdict, trials, violations, first violation."""
    redactor = known()
    table = Table(
        title=shown(redactor.text(f"{run.target} — run {run.run_id}")),
        title_justify="left",
    )
    for column in ("experiment", "verdict", "trials", "fault landed", "violations", "first finding"):
        table.add_column(column)
    for experiment in run.experiments:
        first = ""
        if experiment.violations:
            v = experiment.violations[0]
            first = f"{v.invariant}: {v.event_id} {observed_text(v.observed, v.source, v.expected)}"
        elif experiment.reason or experiment.error:
            # why it erred or was skipped (a skipped experiment has a reason, never an error)
            first = str(experiment.reason or experiment.error)[:160]
        trials = experiment.trials
        landed = (
            f"{experiment.fault_landed}/{trials}" if experiment.fault_landed is not None and trials else "—"
        )
        table.add_row(
            shown(redactor.text(experiment.name)),
            f"[{STYLE.get(experiment.verdict, '')}]{shown(experiment.verdict)}[/]",
            str(trials),
            landed,
            str(len(experiment.violations)),
            shown(redactor.text(first)),
        )
    return table


def spread_lines(run: RunDocument) -> list[str]:
    """One line per experiment that sent bursts: how close together they arrived."""
    redactor = known()
    lines = []
    for experiment in run.experiments:
        spread = experiment.arrival_spread
        if spread is None:
            continue
        parts = [
            f"{label} p50 {figures.p50:.3f} ms (max {figures.max:.3f})"
            for label, figures in (
                ("sender release", spread.release_ms),
                ("handler arrival", spread.handler_ms),
            )
            if figures is not None
        ]
        lines.append(
            shown(redactor.text(f"{experiment.name}: {spread.bursts} bursts released {spread.burst_sync}; "))
            + ("; ".join(parts) or "no spread measured")
            + (
                ""
                if spread.handler_ms is not None
                else " (the handler does not report when requests entered it)"
            )
        )
    return lines
