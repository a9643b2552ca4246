"""`acklab flow ...`: run the scoped repair flow, make a sandbox to watch it in, or run the demo."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path

import click

from acklab.evidence.exitcodes import ExitCode
from acklab.evidence.redaction import remember
from acklab.harness.engine.interrupts import sigterm_interrupts
from acklab.harness.specs.credentials import url_credentials_of

from .approvals import choose_source
from .duo import fetch_merge_request_head, merge_request_from_goal
from .escape import hidden_count, numbered, visible
from .proposers import make_proposer
from .publish import GitLabPublisher, LocalPublisher, NoPublisher, Publisher
from .runner import FlowConfig, FlowResult, run_flow
from .sandbox import withheld
from .scratch_repo import make_scratch_repo
from .spec import check_target_file, load_spec
from .worktree import toplevel

SECRET_VARIABLES = (
    "GITLAB_TOKEN",
    "CI_JOB_TOKEN",
    "DUO_WORKFLOW_GIT_HTTP_PASSWORD",  # a Duo flow's OAuth token again, for git
    "ACKLAB_LLM_API_KEY",
    "ACKLAB_MANIFEST_KEY",
)


def secrets_from_env() -> list[str]:
    """Values that must never reach the trail, the journal or a log (remembered for redaction)."""
    found = [os.environ[v] for v in SECRET_VARIABLES if os.environ.get(v)]
    remember(*found)
    return found


@click.group()
def flow() -> None:
    """The scoped repair flow: reproduce, propose, approve, apply, verify, strike again, publish."""


def _mr_iid(value: str | None) -> int | None:
    if value is None:
        return None
    if value == "goal":
        # A GitLab Duo flow: the merge request comes in its goal (exit 3 when it names none).
        return merge_request_from_goal(os.environ)
    if value == "ci":
        value = os.environ.get("CI_MERGE_REQUEST_IID", "")
        if not value:
            raise click.BadParameter(
                "--mr ci needs CI_MERGE_REQUEST_IID (a merge request pipeline); in a GitLab Duo flow, "
                "--mr goal reads it from the flow's goal"
            )
    if not value.isdigit() or int(value) < 1:
        raise click.BadParameter(f"got {value!r}; expected a merge request IID like 12, 'ci' or 'goal'")
    return int(value)


@flow.command()
@click.argument("spec_path", metavar="SPEC", type=click.Path(path_type=Path))
@click.option("--local", is_flag=True, help="Commit the verified patch to a new local branch.")
@click.option(
    "--mr",
    "mr",
    metavar="IID",
    help="Publish to this merge request ('ci': CI_MERGE_REQUEST_IID; 'goal': the one a GitLab Duo "
    "flow's goal names, its head fetched first).",
)
@click.option(
    "--proposer", type=click.Choice(["recipe", "llm"]), help="Override the spec's proposer (default: recipe)."
)
@click.option(
    "--decisions",
    type=click.Path(path_type=Path, dir_okay=False),
    help="YAML/JSON list of decisions for the approval gates (gate, decision, actor, delegated_by).",
)
@click.option(
    "--auto-approve", is_flag=True, help="Approve the proposal as actor 'auto' (never the default)."
)
@click.option(
    "--out", type=click.Path(path_type=Path, file_okay=False), default=Path("out"), show_default=True
)
@click.option("--trials", type=click.IntRange(1, 100), help="Override the spec's trials per experiment.")
@click.option("--seed", type=int, help="Override the spec's seed.")
@click.option(
    "--propose-only",
    is_flag=True,
    help="Stop before the approve gate: reproduce, propose, guard, print the proposal (exit 0).",
)
@click.option(
    "--unsandboxed",
    is_flag=True,
    help="Run the code under repair as your own user when no sandbox is possible here (no bubblewrap, "
    "not root); the trail, the approve gate and the MR note say so.",
)
@click.option(
    "--db",
    metavar="URL",
    help="The fixture flow only: serve every checkout on this PostgreSQL server (a login that may "
    "CREATEROLE) instead of SQLite in its sandbox; a target spec names its own database.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the result as one JSON object on stdout.")
def run(
    *,
    spec_path: Path,
    local: bool,
    mr: str | None,
    proposer: str | None,
    decisions: Path | None,
    auto_approve: bool,
    out: Path,
    trials: int | None,
    seed: int | None,
    propose_only: bool,
    unsandboxed: bool,
    db: str | None,
    as_json: bool,
) -> int:
    """Repair the handler under the flow spec SPEC (e.g. flows/repair.yaml).

    Exit codes: 0 published, applied or nothing to repair; 1 the patch did not hold;
    3 invalid spec or decisions; 4 the lab could not run; 5 a gate refused (scope guard,
    approval, moved head, no sandbox possible, the patch rewrote itself); 6 interrupted.
    """
    iid = _mr_iid(mr)
    if local and iid is not None:
        raise click.UsageError("--local and --mr exclude each other; pick where the patch goes")
    spec = load_spec(spec_path)
    if db is not None:
        if not spec.target.startswith("fixture:"):
            raise click.UsageError(
                f"--db serves the fixture on PostgreSQL; target {spec.target!r} names its own database "
                "(database: and {{database_url}} in its spec)"
            )
        if not db.startswith(("postgresql://", "postgresql+psycopg://", "postgres://")):
            raise click.UsageError(
                f"--db {db!r}: expected a PostgreSQL URL, e.g. postgresql://acklab@127.0.0.1/acklab"
            )
        remember(*url_credentials_of(db))
    if trials is not None:
        spec = dataclasses.replace(spec, trials=trials)
    if seed is not None:
        spec = dataclasses.replace(spec, seed=seed)
    repo = toplevel(Path.cwd())
    check_target_file(spec, repo)
    source = choose_source(decisions=decisions, auto_approve=auto_approve, interactive=sys.stdin.isatty())
    publisher: Publisher = NoPublisher()
    expected_head = None
    if local:
        publisher = LocalPublisher(repo=repo, branch_prefix=spec.branch_prefix)
    elif iid is not None:
        gitlab_publisher = GitLabPublisher.from_env(iid)
        if mr == "goal":
            # A workload is a depth-1 clone of a ref of its own: repair the MR's head, fetched.
            expected_head = fetch_merge_request_head(repo, gitlab_publisher.head())
        publisher = gitlab_publisher
    config = FlowConfig(
        repo=repo,
        spec=spec,
        out=out if out.is_absolute() else Path.cwd() / out,
        proposer=make_proposer(proposer or spec.proposer, spec),
        decisions=source,
        publisher=publisher,
        secrets=secrets_from_env(),
        propose_only=propose_only,
        unsandboxed=unsandboxed,
        db=db,
        expected_head=expected_head,
    )
    # The tokens live in their clients now: nothing the flow starts can inherit them.
    # SIGTERM (a cancelled job, a GitLab Duo step past its timeout) ends it as Ctrl-C does: the
    # trail says interrupted, worktrees and processes go, nothing is published (exit 6).
    with withheld(), sigterm_interrupts():
        result = run_flow(config)
    _print(result, scope=spec.scope.as_dict(), as_json=as_json)
    return result.exit_code


def _print(result: FlowResult, *, scope: dict[str, list[str]], as_json: bool) -> None:
    doc = {
        "run_id": result.run_id,
        "outcome": result.outcome,
        "exit_code": result.exit_code,
        "detail": result.detail,
        "bundle": str(result.bundle),
        "trail": str(result.bundle / "trail.json"),
        "published": result.published,
        "summary": result.summary,
        "proposal": result.proposal,
    }
    if as_json:
        click.echo(json.dumps(doc, indent=2))
        return
    # The detail may quote an approver or a guard reason; the diff is the proposal's: all escaped.
    click.echo(f"flow {result.run_id}: {result.outcome} (exit {result.exit_code})")
    click.echo(f"  {visible(result.detail)}")
    for line in result.summary:
        click.echo(f"  {visible(line)}")
    click.echo(f"  trail: {doc['trail']}")
    if result.outcome == "proposed" and result.proposal:
        diff = result.proposal["diff"]
        # What an approver needs beside the diff: what the patch may touch, and what it may not.
        allowed, denied = ", ".join(scope["allow"]), ", ".join(scope["deny"]) or "-"
        click.echo(visible(f"scope: may change {allowed}; never {denied}", keep_newlines=False))
        click.echo(f"proposal {result.proposal['id']} (sha256 {result.proposal['diff_sha256']}):")
        if hidden_count(diff):
            click.echo(
                f"WARNING: the diff holds {hidden_count(diff)} control or invisible character(s), shown escaped"
            )
        click.echo(numbered(diff))


@flow.command()
@click.argument("directory", type=click.Path(path_type=Path, file_okay=False))
def sandbox(*, directory: Path) -> int:
    """Make DIR a scratch repository whose app/webhooks.py is the unsafe handler.

    Then watch the flow repair it: cd DIR && acklab flow run flows/repair.yaml --local
    """
    sha = make_scratch_repo(directory)
    click.echo(f"sandbox ready at {directory} ({sha[:12]}): app/webhooks.py is the unsafe handler")
    click.echo(f"next: cd {directory} && acklab flow run flows/repair.yaml --local")
    return int(ExitCode.OK)


@flow.command()
@click.option(
    "--dir",
    "directory",
    type=click.Path(path_type=Path, file_okay=False),
    help="Where to make the sandbox (default: a new temporary directory).",
)
@click.option("--trials", type=click.IntRange(1, 100), default=1, show_default=True)
@click.option(
    "--out",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="Evidence directory for the flow's bundle (default: out/ inside the sandbox).",
)
def demo(*, directory: Path | None, trials: int, out: Path | None) -> int:
    """The repair story: sandbox, recipe repair with delegated approvals, before and after."""
    from .demo import run_demo

    return run_demo(directory, trials=trials, out=out)


@flow.command("init")
@click.option(
    "--target",
    "target",
    required=True,
    metavar="SPEC",
    help="Your target spec (kind: target with command:), relative to the repository's root.",
)
@click.option(
    "--scope",
    "scope",
    required=True,
    multiple=True,
    metavar="FILE",
    help="The handler file a repair may change (repeat for more than one).",
)
@click.option(
    "--output",
    type=click.Path(path_type=Path, dir_okay=False),
    default=Path("repair.flow.yaml"),
    show_default=True,
    help="Where to write the flow spec.",
)
@click.option(
    "--runs",
    type=click.Path(path_type=Path, file_okay=False),
    default=Path("out"),
    show_default=True,
    help="The evidence directory of your last `acklab run` (its failures become reproduce).",
)
@click.option("--force", is_flag=True, help="Replace --output if it exists.")
def init(*, target: str, scope: tuple[str, ...], output: Path, runs: Path, force: bool) -> int:
    """Write a flow spec that repairs FILE of your own service (run `acklab run --target SPEC` first).

    Then: acklab validate repair.flow.yaml && acklab flow run repair.flow.yaml --propose-only
    """
    from .init import init_flow

    repo = toplevel(Path.cwd())
    written = init_flow(repo, target=target, scope=scope, output=output, runs=runs, force=force)
    for note in written.notes:
        click.echo(f"note: {visible(note)}", err=True)
    click.echo(f"wrote {written.path}")
    click.echo(f"next: acklab validate {output} && acklab flow run {output} --propose-only")
    return int(ExitCode.OK)
