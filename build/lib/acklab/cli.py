"""The one `acklab` command. It only dispatches: each package owns its subcommands.

Subcommands are imported lazily so that `acklab --help` and a fixture server do not pay
for the console, the repair flow or Playwright.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

import click

from acklab.evidence.exitcodes import AcklabError, ExitCode
from acklab.evidence.redaction import redact

from . import __version__

# command name -> "module:attribute" of a click command or group
COMMANDS: dict[str, tuple[str, str]] = {
    "serve": ("acklab.app.cli:serve", "Serve a built-in target (the webhook fixture) over HTTP."),
    "run": ("acklab.harness.cli:run", "Attack a target with fault experiments and give a verdict."),
    "plan": ("acklab.harness.cli:plan", "Print the frozen delivery plan of a run; nothing is sent."),
    "validate": ("acklab.harness.cli:validate", "Check a target, experiment or flow spec file."),
    "history": ("acklab.evidence.cli:history", "Replay a run's steps from the journal."),
    "evidence": ("acklab.evidence.cli:evidence", "Verify, merge, pull bundles; convert reports."),
    "console": ("acklab.console.cli:console", "Serve the read-only evidence console."),
    "pages": ("acklab.console.cli:pages", "Build the static GitLab Pages snapshot of the console."),
    "flow": ("acklab.flows.cli:flow", "The scoped repair flow: run it, or make a sandbox."),
    "demo": ("acklab.harness.demo:demo", "The guided demo that `make demo` runs."),
    "explore": (
        "acklab.harness.explore_cli:explore",
        "Search delivery schedules for one that breaks an invariant.",
    ),
    "replay": (
        "acklab.harness.explore_cli:replay",
        "Re-run exactly the schedule an explorer incident recorded.",
    ),
    "janitor": (
        "acklab.harness.janitor:janitor",
        "End and clean what a crashed lab left behind (open leases).",
    ),
    "sweep": (
        "acklab.harness.sweep:sweep",
        "Run the target x database x experiment matrix; heatmap of verdicts.",
    ),
}


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
            return _unavailable(cmd_name, f"{module_name} is not built yet ({exc})")
        command = getattr(module, attr, None)
        if not isinstance(command, click.Command):
            return _unavailable(cmd_name, f"{module_name}.{attr} is not built yet")
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, COMMANDS[name][1]) for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


def _unavailable(name: str, why: str) -> click.Command:
    def callback(**_: Any) -> None:
        raise AcklabError(f"`acklab {name}` is not available: {why}", exit_code=ExitCode.LAB_ERROR)

    return click.Command(name, callback=callback, help=f"(not available: {why})")


EPILOG = (
    "Exit codes: 0 pass, 1 a verdict failed, 2 usage error, 3 invalid spec or input, "
    "4 the lab could not run, 5 a safety or scope gate refused, 6 interrupted (resumable), "
    "7 evidence integrity check failed."
)


@click.group(cls=LazyGroup, epilog=EPILOG, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="acklab")
def cli() -> None:
    """acklab — prove that a webhook handler keeps one event to at most one side effect."""


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the CLI and map errors onto the exit-code contract."""
    try:
        rc = cli.main(args=argv, prog_name="acklab", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("interrupted", err=True)
        sys.exit(ExitCode.INTERRUPTED)
    except click.ClickException as exc:
        exc.show()
        sys.exit(ExitCode.USAGE if isinstance(exc, click.UsageError) else exc.exit_code)
    except AcklabError as exc:
        # Library messages quote URLs and values: the process's redaction has the last word.
        click.echo(f"acklab: error: {redact(str(exc))}", err=True)
        sys.exit(int(exc.exit_code))
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        sys.exit(ExitCode.INTERRUPTED)
    sys.exit(int(rc) if isinstance(rc, int) else 0)
