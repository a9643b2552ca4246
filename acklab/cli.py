"""The one `acklab` command. It only dispatches: each package owns its subcommands.

Subcommands are imported lazily so that `acklab --help` and a fixture server do not pay
for the console, the repair flow or Playwright.
"""

from __future__ import annotations

import importlib
import sys
import traceback
from typing import Any, NoReturn

import click

from acklab.evidence.exitcodes import AcklabError, ExitCode
from acklab.evidence.extras import PACKAGES, MissingExtra, install_command, missing_module
from acklab.evidence.redaction import redact

from . import __version__

# command name -> "module:attribute" of a click command or group
COMMANDS: dict[str, tuple[str, str]] = {
    "serve": ("acklab.app.cli:serve", "Serve a built-in target (the webhook fixture) over HTTP."),
    "run": ("acklab.harness.cli.run:run", "Attack a target with fault experiments and give a verdict."),
    "plan": ("acklab.harness.cli.run:plan", "Print the frozen delivery plan of a run; nothing is sent."),
    "validate": ("acklab.validate:validate", "Check a target, experiment or flow spec file."),
    "init": (
        "acklab.harness.cli.init:init",
        "Write a target spec, a pytest test and a CI snippet for your service; find its effects.",
    ),
    "history": ("acklab.evidence.cli:history", "Replay a run's steps from the journal."),
    "evidence": ("acklab.evidence.cli:evidence", "Verify, merge, pull bundles; convert reports."),
    "console": ("acklab.console.cli:console", "Serve the read-only evidence console."),
    "pages": ("acklab.console.cli:pages", "Build the static GitLab Pages snapshot of the console."),
    "flow": ("acklab.flows.cli:flow", "The scoped repair flow: run it, or make a sandbox."),
    "demo": ("acklab.harness.cli.demo:demo", "The guided demo that `make demo` runs."),
    "explore": (
        "acklab.harness.cli.explore:explore",
        "Search delivery schedules for one that breaks an invariant.",
    ),
    "replay": (
        "acklab.harness.cli.explore:replay",
        "Re-run exactly the schedule an explorer incident recorded.",
    ),
    "janitor": (
        "acklab.harness.cli.janitor:janitor",
        "End and clean what a crashed lab left behind (open leases).",
    ),
    "sweep": (
        "acklab.harness.cli.sweep:sweep",
        "Run the target x database x experiment matrix; heatmap of verdicts.",
    ),
}


# The extra a command needs (a package two extras share is named by the command's own).
COMMAND_EXTRAS: dict[str, str] = {
    "serve": "fixture",
    "console": "console",
    "pages": "console",
    "flow": "flow",
    "demo": "all",
    "explore": "explore",
    "replay": "explore",
}


def _hint(command: str | None, exc: ModuleNotFoundError) -> str:
    """`missing_module`, naming the command's own extra when the package is an extra's."""
    name = (exc.name or "").split(".")[0]
    extra = COMMAND_EXTRAS.get(command or "")
    if extra and PACKAGES.get(name, (name, None))[1] not in (None, "dev"):
        distribution = PACKAGES[name][0]
        return f"it needs the Python package {distribution!r}: {install_command(extra)}"
    return missing_module(exc)


class LazyGroup(click.Group):
    """A click group whose subcommands are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMANDS:
            return None
        module_name, _, attr = COMMANDS[cmd_name][0].partition(":")
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            return _unavailable(cmd_name, _hint(cmd_name, exc))
        command = getattr(module, attr, None)
        if not isinstance(command, click.Command):
            return _unavailable(
                cmd_name, f"{module_name}.{attr} is missing from this installation; reinstall acklab"
            )
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, COMMANDS[name][1]) for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def invoke(self, ctx: click.Context) -> Any:
        """Run the subcommand; an exception nothing expected is an internal error (exit 4), its
        traceback shown when `acklab --debug` (or ACKLAB_DEBUG) is in this context's params."""
        try:
            return super().invoke(ctx)
        except HANDLED_IN_MAIN:
            raise
        except BaseException as exc:  # the last line of defence: RecursionError, MemoryError, bugs
            _internal_error(exc, debug=bool(ctx.params.get("debug")))


def _unavailable(name: str, why: str) -> click.Command:
    """A stand-in for a command that cannot be imported: whatever it is given, it says why (exit 4)."""

    def callback(**_: Any) -> None:
        raise MissingExtra(f"`acklab {name}` is not available: {why}")

    return click.Command(
        name,
        callback=callback,
        help=f"(not available: {why})",
        params=[click.Argument(["args"], nargs=-1, type=click.UNPROCESSED)],
        context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
    )


# What `main` maps onto the contract itself; anything else is an internal error.
HANDLED_IN_MAIN = (
    click.ClickException,
    click.exceptions.Exit,
    click.exceptions.Abort,
    AcklabError,
    KeyboardInterrupt,
    EOFError,  # click makes it an Abort: interrupted
    ModuleNotFoundError,
    SystemExit,
    GeneratorExit,
)

EPILOG = (
    "Exit codes: 0 pass, 1 a verdict failed, 2 usage error, 3 invalid spec or input, "
    "4 the lab could not run, 5 a safety or scope gate refused, 6 interrupted (resumable), "
    "7 evidence integrity check failed."
)


@click.group(cls=LazyGroup, epilog=EPILOG, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="acklab")
@click.option(
    "--debug",
    is_flag=True,
    envvar="ACKLAB_DEBUG",
    help="On an internal error, print the traceback (also: ACKLAB_DEBUG=1).",
)
def cli(debug: bool) -> None:
    """acklab — prove that a webhook handler keeps one event to at most one side effect."""


def _subcommand(argv: list[str] | None) -> str | None:
    args = sys.argv[1:] if argv is None else argv
    return next((a for a in args if not a.startswith("-")), None)


def _internal_error(exc: BaseException, debug: bool) -> NoReturn:
    """An unexpected exception is the lab's failure (exit 4), never a verdict (exit 1)."""
    if debug:
        traceback.print_exception(exc)
    what = f"{type(exc).__name__}: {redact(str(exc))}" if str(exc) else type(exc).__name__
    if len(what) > 500:
        what = what[:497] + "..."
    hint = "" if debug else " (run with --debug or ACKLAB_DEBUG=1 for the traceback)"
    click.echo(f"acklab: internal error: {what}; please report it{hint}", err=True)
    sys.exit(ExitCode.LAB_ERROR)


def _sandbox(unsandboxed: bool, hide: tuple[Any, ...]) -> Any:
    """The repair flow's sandbox, as the harness's confinement (imported when first needed)."""
    from acklab.flows.sandbox import provider

    return provider(unsandboxed, hide)


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the CLI and map every error onto the exit-code contract.

    Nothing escapes as a traceback with exit 1 (which means "a verdict failed"): an
    unexpected exception is an internal error, exit 4. Code under test that the harness
    serves from a checkout runs in the flow's sandbox (installed here, the one place that
    sees both).
    """
    from acklab.harness.procs.confinement import install_provider

    install_provider(_sandbox)
    try:
        rc = cli.main(args=argv, prog_name="acklab", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("interrupted", err=True)
        sys.exit(ExitCode.INTERRUPTED)
    except click.ClickException as exc:
        exc.show()
        sys.exit(click_exit_code(exc))
    except AcklabError as exc:
        # Library messages quote URLs and values: the process's redaction has the last word.
        click.echo(f"acklab: error: {redact(str(exc))}", err=True)
        sys.exit(int(exc.exit_code))
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        sys.exit(ExitCode.INTERRUPTED)
    except ModuleNotFoundError as exc:
        command = _subcommand(argv)
        click.echo(f"acklab: error: cannot run this command: {_hint(command, exc)}", err=True)
        sys.exit(ExitCode.LAB_ERROR)
    except (SystemExit, GeneratorExit):
        raise
    except BaseException as exc:  # raised before any subcommand ran (LazyGroup.invoke has the rest)
        _internal_error(exc, debug=False)
    sys.exit(int(rc) if isinstance(rc, int) else 0)


def click_exit_code(exc: click.ClickException) -> ExitCode:
    """A usage error is 2; any other error click raises (a file a `click.File` cannot open...)
    is bad input, 3: click's own default, 1, is the contract's "a verdict failed"."""
    return ExitCode.USAGE if isinstance(exc, click.UsageError) else ExitCode.INVALID_INPUT
