"""``acklab run``, ``acklab plan`` and ``acklab validate``.

Commands return the exit code of the contract (docs/cli.md#exit-codes-every-command); errors are `AcklabError`s that
the dispatcher prints. Human output goes to stderr; ``--json`` prints exactly one JSON
object on stdout.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource
from rich.table import Table

from acklab.evidence.documents.result import RunResultJson
from acklab.evidence.exitcodes import AcklabError, ExitCode
from acklab.evidence.extras import MissingExtra
from acklab.evidence.redaction import known
from acklab.harness.cli.params import Finite
from acklab.harness.cli.progress import ProgressDisplay, output_console, shown
from acklab.harness.core.experiment_specs import DEFAULT_TRIALS, resolve
from acklab.harness.core.plan import BOUNDS, BURST_SYNCS, MAX_TRIALS, RunSettings
from acklab.harness.engine.comparison import ComparisonResult, compared_targets, run_comparison
from acklab.harness.engine.runner import RunOptions, RunResult, prepare
from acklab.harness.engine.runner import run as run_lab
from acklab.harness.errors import HarnessError, SpecError, UsageError
from acklab.harness.experiments import EXPERIMENTS
from acklab.harness.specs.load import all_problems, spec_name
from acklab.harness.specs.target import load_target_spec
from acklab.harness.wire.providers import DEFAULT_TIME_COMPRESSION

CONTEXT = {"help_option_names": ["-h", "--help"]}


def _experiments_epilog() -> str:
    """Every experiment by its stable name, three to a line (\\b: click never rewraps them, so
    no name is broken at a hyphen), the default ones marked."""
    names = [f"{'*' if e.default else ' '} {name}" for name, e in EXPERIMENTS.items()]
    width = max(map(len, names)) + 2
    rows = [
        "  " + "".join(n.ljust(width) for n in names[i : i + 3]).rstrip() for i in range(0, len(names), 3)
    ]
    return (
        "\b\nExperiments (* run when none is named; docs/experiments.md says what each breaks):\n"
        + "\n".join(rows)
    )


EXPERIMENTS_EPILOG = _experiments_epilog()


def _options(command: Callable[..., Any]) -> Callable[..., Any]:
    options = [
        click.option(
            "--target",
            default="fixture:live",
            show_default=True,
            help="fixture:live, fixture:unsafe, or a target spec file (kind: target).",
        ),
        click.option(
            "--experiment",
            "experiments",
            multiple=True,
            metavar="NAME|FILE",
            help="Repeatable; default: every experiment marked * below. Or an experiment spec file "
            "(kind: experiment) that sets trials and parameters.",
        ),
        click.option(
            "--trials",
            type=click.IntRange(1, MAX_TRIALS),
            default=None,
            help=f"Trials per experiment.  [default: an experiment spec's trials, else {DEFAULT_TRIALS}]",
        ),
        click.option(
            "--seed",
            type=int,
            default=None,
            help="Root seed of the plan (event ids); default: random, recorded.",
        ),
        click.option(
            "--db",
            default=None,
            metavar="URL",
            help="Fixture targets: database URL instead of a temporary SQLite file.",
        ),
        click.option(
            "--out",
            type=click.Path(file_okay=False, path_type=Path),
            default=Path("out"),
            show_default=True,
            help="Evidence directory; the run's bundle is <out>/<run_id>/.",
        ),
        click.option(
            "--json", "as_json", is_flag=True, help="Print the result as one JSON object on stdout."
        ),
        click.option(
            "--resume",
            default=None,
            metavar="RUN_ID",
            help="Finish an interrupted run (same --out, same --target).",
        ),
        click.option("--allow-remote", is_flag=True, help="Allow a target endpoint off the loopback range."),
        click.option(
            "--allow-foreign-service",
            is_flag=True,
            help="A spec without command: names a service this job must have started (its own process "
            "tree or process group); allow one started elsewhere (another terminal, a container's port).",
        ),
        click.option(
            "--checkout",
            type=click.Path(file_okay=False, path_type=Path),
            default=None,
            metavar="DIR",
            help="Serve the target from this checkout (a clone or worktree) in a sandbox, over a loopback "
            "socket; the lab never imports its code. fixture:live|unsafe: its fixture; a target spec "
            "(relative to DIR, with command: and {{port}}): started by its command: from a private copy.",
        ),
        click.option(
            "--unsandboxed",
            is_flag=True,
            help="With --checkout: serve it as your own user when no sandbox is possible here "
            "(bubblewrap missing and not root); it is said on stderr.",
        ),
        click.option(
            "--shard",
            default=None,
            metavar="I/N",
            help="Run only shard I of N of the trial plan (CI parallel:matrix).",
        ),
        click.option(
            "--burst",
            type=click.IntRange(int(BOUNDS["burst"][0]), int(BOUNDS["burst"][1])),
            default=16,
            show_default=True,
            help="concurrent-duplicates: deliveries released together.",
        ),
        click.option(
            "--burst-sync",
            type=click.Choice(BURST_SYNCS),
            default=RunSettings.burst_sync,
            show_default=True,
            help="How a burst is released: last-byte (every request pre-sent on its own connection but "
            "its last byte, the last bytes released in one loop), single-packet (HTTP/2 targets only: "
            "every request a stream of one connection, their final frames in one TCP packet; refused, "
            "exit 3, when the target does not speak HTTP/2) or none (each delivery connects after the "
            "release, for comparison).",
        ),
        click.option(
            "--time-compression",
            type=Finite(*BOUNDS["time_compression"]),
            default=DEFAULT_TIME_COMPRESSION,
            show_default=True,
            help="Retry schedules are divided by this factor (order and count kept; 1 is real time).",
        ),
        click.option(
            "--handler-timeout",
            type=Finite(*BOUNDS["handler_timeout_s"]),
            default=RunSettings.handler_timeout_s,
            show_default=True,
            metavar="SECONDS",
            help="How long the lab waits for the handler's answer to one delivery, exactly: what a "
            "hanging target costs per delivery (below the provider's timeout it also ends the "
            "sender's wait).",
        ),
        click.option(
            "--deadline",
            type=Finite(min=1),
            default=None,
            metavar="SECONDS",
            help="Stop the run after this long: finished trials are kept, exit 6, resumable with --resume.",
        ),
        click.option(
            "--settle-ms",
            type=Finite(*BOUNDS["settle_ms"]),
            default=RunSettings.settle_ms,
            show_default=True,
            help="Effects count as settled once they read the same over this window (after the "
            "target's expect.effects_within_s has passed since the last answer).",
        ),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def _run_options(kwargs: dict[str, Any]) -> RunOptions:
    settings = RunSettings(
        time_compression=kwargs["time_compression"],
        burst=kwargs["burst"],
        burst_sync=kwargs["burst_sync"],
        handler_timeout_s=kwargs["handler_timeout"],
        settle_ms=kwargs["settle_ms"],
    )
    ctx = click.get_current_context()
    explicit = {
        setting: kwargs[name]
        for name, setting in (
            ("burst", "burst"),
            ("burst_sync", "burst_sync"),
            ("time_compression", "time_compression"),
            ("handler_timeout", "handler_timeout_s"),
            ("settle_ms", "settle_ms"),
        )
        if ctx.get_parameter_source(name) is ParameterSource.COMMANDLINE
    }
    resolved = resolve(tuple(kwargs["experiments"]), kwargs["trials"], settings, explicit=explicit)
    return RunOptions(
        target=kwargs["target"],
        experiments=resolved.names,
        trials=resolved.trials,
        seed=kwargs["seed"],
        db=kwargs["db"],
        out=kwargs["out"],
        resume=kwargs["resume"],
        allow_remote=kwargs["allow_remote"],
        allow_foreign_service=kwargs["allow_foreign_service"],
        shard=kwargs["shard"],
        settings=resolved.settings,
        checkout=kwargs["checkout"],
        unsandboxed=kwargs.get("unsandboxed", False),
        deadline_s=kwargs["deadline"],
    )


@contextmanager
def _json_on_error(as_json: bool, target: str) -> Iterator[None]:
    """With --json, a run that ends without a verdict (exit 3-7) still prints its one object."""
    try:
        yield
    except AcklabError as exc:
        if as_json:
            _print_json(RunResultJson.failed(target, str(exc)))
        raise
    except Exception as exc:
        if as_json:
            _print_json(RunResultJson.failed(target, f"lab failure: {type(exc).__name__}: {exc}"))
        raise


def _print_json(result: RunResultJson) -> None:
    click.echo(json.dumps(known().doc(result.printed()), sort_keys=False))


@click.command("run", context_settings=CONTEXT, epilog=EXPERIMENTS_EPILOG)
@_options
@click.option(
    "--compare-with",
    "compare_with",
    multiple=True,
    metavar="TARGET[,TARGET...]",
    help="Also run the same plan (same seed) against these targets and write one comparison "
    "bundle; the exit code stays --target's.",
)
@click.option(
    "--baseline",
    "baseline",
    default=None,
    metavar="REF",
    help="Before/after your change: also attack the code of git REF (HEAD, HEAD~1, a branch), checked "
    "out in a worktree and served as the target says, with the same plan; one comparison bundle, "
    "the exit code the working tree's.",
)
def run(**kwargs: Any) -> int:
    """Attack a target with fault experiments and give a verdict.

    Exit 0: every experiment passed. 1: an experiment proved a violation (even if others
    erred; they are listed). 4: nothing failed but something could not be judged. An
    experiment that does not apply to the target is listed as skipped, with its reason.
    """
    result: RunResult | ComparisonResult
    with _json_on_error(kwargs["as_json"], kwargs["target"]):
        if kwargs["baseline"] is not None:
            if kwargs["compare_with"]:
                raise UsageError(
                    "--baseline and --compare-with: pick one (a baseline compares the working tree with REF)"
                )
            from acklab.harness.engine.baseline import run_baseline

            result = run_baseline(
                _run_options(kwargs),
                kwargs["baseline"],
                [ProgressDisplay()],
                say=lambda line: click.echo(line, err=True),
            )
            tree, base = result.doc.targets[0], result.doc.targets[1]
            after, before = result.runs[0], result.runs[1]
            click.echo(
                f"{base}: {before.verdict}; {tree}: {after.verdict} (seed {result.doc.seed}): {result.bundle}",
                err=True,
            )
        elif kwargs["compare_with"]:
            options = _run_options(kwargs)
            targets = compared_targets(options.target, kwargs["compare_with"])
            result = run_comparison(options, targets, [ProgressDisplay()])
            click.echo(
                f"comparison of {', '.join(targets)} (seed {result.doc.seed}): {result.bundle}", err=True
            )
        else:
            result = run_lab(_run_options(kwargs), [ProgressDisplay()])
    if kwargs["as_json"]:
        _print_json(result.result_json())
    return int(result.exit_code)


@click.command("plan", context_settings=CONTEXT, epilog=EXPERIMENTS_EPILOG)
@_options
def plan(**kwargs: Any) -> int:
    """Print the frozen delivery plan of a run; nothing is sent."""
    with _json_on_error(kwargs["as_json"], kwargs["target"]):
        the_plan = prepare(_run_options(kwargs)).plan
    if kwargs["as_json"]:
        click.echo(json.dumps(the_plan.as_dict()))
        return int(ExitCode.OK)
    console = output_console(stderr=False)
    console.print(
        f"plan for [bold]{shown(the_plan.target)}[/]: seed {the_plan.seed}, {the_plan.trials_per_experiment} trials per "
        f"experiment, {len(the_plan.trials)} trials"
        + (f", shard {the_plan.shard_label}" if the_plan.shard else "")
    )
    table = Table("trial", "events", "deliveries (kind/attempt/fault @ms)")
    for trial in the_plan.trials:
        steps = [f"{d.kind}/{d.attempt}/{d.fault}@{d.at_ms:g}" for d in trial.deliveries]
        grouped = [(step, len(list(run))) for step, run in itertools.groupby(steps)]
        deliveries = ", ".join(step if n == 1 else f"{n} x {step}" for step, n in grouped)
        table.add_row(shown(trial.trial_id), shown(" ".join(trial.event_ids)), shown(deliveries))
    console.print(table)
    for skipped in the_plan.skipped:
        what = f"{skipped.name} ({skipped.variant})" if skipped.variant else skipped.name
        console.print(f"skipped: {shown(what)}: {shown(skipped.reason)}")
    return int(ExitCode.OK)


@click.command("validate", context_settings=CONTEXT)
@click.argument("file", type=click.Path(path_type=Path))
@click.option(
    "--allow-unset",
    is_flag=True,
    help="Do not fail on env:NAME references whose variable is unset (they are still listed).",
)
@click.option(
    "--allow-remote", is_flag=True, help="Allow URLs off the loopback range (as `acklab run --allow-remote`)."
)
def validate(file: Path, allow_unset: bool, allow_remote: bool) -> int:
    """Check a target, experiment or flow spec file (the kind is read from its `kind:`).

    The verdict goes to stdout. For a target spec it also lists the env:NAME variables that
    are unset (exit 3 unless --allow-unset), holds every URL the lab will contact to the
    loopback rule (exit 5, as `acklab run` would refuse it), and names what this machine lacks
    to run it: acklab's extras (with the pip command) and the tools its commands name (exit 4).
    """
    problems = all_problems(file)
    if problems:
        for line in problems:
            click.echo(f"{file}: {line}")
        raise SpecError(f"{file}: {len(problems)} problem{'s' if len(problems) != 1 else ''}")
    kind, name = spec_name(file)
    if kind == "target":
        from acklab.harness.targets.validate import validate_target

        spec = load_target_spec(file)
        try:
            notes = validate_target(
                spec, source=str(file), allow_unset=allow_unset, allow_remote=allow_remote
            )
        except HarnessError as exc:
            click.echo(f"{file}: not valid: {str(exc).removeprefix(f'{file}: ')}")
            raise
        for note in notes:
            click.echo(f"{file}: note: {note}")
        from acklab.harness.targets.needs import missing

        lacking = missing(spec, spec_dir=file.resolve().parent)
        for line in lacking:
            click.echo(f"{file}: missing: {line}")
        if lacking:
            click.echo(f"{file}: a valid {kind} spec ({name}), but this machine cannot run it yet")
            raise MissingExtra(f"{file}: {len(lacking)} thing(s) to install first (listed above)")
    click.echo(f"{file}: a valid {kind} spec ({name})")
    return int(ExitCode.OK)
