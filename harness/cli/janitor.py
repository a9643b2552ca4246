"""``acklab janitor``: end and clean what a crashed lab left behind (see `acklab.harness.procs.janitor`)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from acklab.evidence.exitcodes import ExitCode
from acklab.evidence.history import printable
from acklab.evidence.journal import Journal, journal_path
from acklab.harness.procs.janitor import Cleanup, sweep


@click.command("janitor", context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("out"),
    show_default=True,
    help="Evidence directory whose journal holds the leases.",
)
@click.option("--dry-run", is_flag=True, help="Say what would be cleaned; touch nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print the cleanups as one JSON object on stdout.")
def janitor(*, out: Path, dry_run: bool, as_json: bool) -> int:
    """End the processes and remove the files and databases a crashed lab left behind."""
    path = journal_path(out)
    if not path.exists():
        done: list[Cleanup] = []
    else:
        with Journal(path) as journal:
            done = sweep(journal, dry_run=dry_run)
    for cleanup in done:
        mark = "in use" if cleanup.in_use else ("ok" if cleanup.ok else "FAILED")
        # A forged lease names whatever it likes: shown with control characters escaped.
        line = f"{mark:7} {cleanup.lease} (run {cleanup.run_id}): {cleanup.outcome}"
        click.echo(printable(line), err=True)
    if not done:
        click.echo("acklab janitor: no open leases", err=True)
    failed = [c for c in done if not c.ok]
    if as_json:
        click.echo(
            json.dumps({"cleaned": [c.as_dict() for c in done], "failed": len(failed)}, ensure_ascii=True)
        )
    return int(ExitCode.LAB_ERROR if failed else ExitCode.OK)
