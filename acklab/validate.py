"""``acklab validate FILE``: the harness's check of any spec file, and for a flow spec the flow's own.

A flow spec is checked as `acklab flow run` reads it (`acklab.flows.spec.load_spec`: checkpoints,
the import allowlist's format) and, when its ``target:`` is a target spec file, that file is
checked too: it must be a file of the repository, with ``command:`` and ``{{port}}`` (every
checkout the flow serves gets a port of its own).
"""

from __future__ import annotations

from pathlib import Path

import click

from acklab.harness.cli.run import validate as harness_validate
from acklab.harness.specs.load import all_problems, load_spec


@click.command(
    "validate", context_settings={"help_option_names": ["-h", "--help"]}, params=harness_validate.params
)
def validate(file: Path, allow_unset: bool, allow_remote: bool) -> int:
    """Check a target, experiment or flow spec file (the kind is read from its `kind:`).

    The verdict goes to stdout. For a target spec it also lists the env:NAME variables that
    are unset (exit 3 unless --allow-unset) and holds every URL the lab will contact to the
    loopback rule (exit 5, as `acklab run` would refuse it). For a flow spec whose target is a
    spec file, that file is checked as the flow serves it (command: and {{port}}).
    """
    if not all_problems(file) and load_spec(file)[0] == "flow":
        from acklab.flows.spec import check_target_file
        from acklab.flows.spec import load_spec as load_flow_spec
        from acklab.flows.worktree import toplevel

        spec = load_flow_spec(file)
        check_target_file(spec, toplevel(Path(file).resolve().parent))
    check = harness_validate.callback
    if check is None:  # a click command always has one
        raise click.UsageError("acklab validate: the harness's check is missing")
    code: int = check(file=file, allow_unset=allow_unset, allow_remote=allow_remote)
    return code
