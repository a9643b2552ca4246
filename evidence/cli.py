"""`acklab evidence ...` and `acklab history`: check, combine, fetch and convert evidence.

Commands return the exit code of the contract; errors are `EvidenceError`s, which the
`acklab` dispatcher prints and maps onto their exit code.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import click

from acklab.evidence.bundle import MANIFEST, Verification, find_bundles, verify
from acklab.evidence.errors import EvidenceInvalid, IntegrityError
from acklab.evidence.exitcodes import ExitCode
from acklab.evidence.gitlab_access import GitLabAccess, strip_credentials
from acklab.evidence.history import load_history, render_table
from acklab.evidence.redaction import remember

if TYPE_CHECKING:
    from acklab.evidence.pull import PullCaps

EVIDENCE_DIR = click.Path(file_okay=False, path_type=Path)


def bundles_in(path: Path) -> list[Path]:
    """`path` itself when it is a bundle, else every bundle found under it (exit 3 when none)."""
    if not path.exists():
        raise EvidenceInvalid(f"{str(path)!r} does not exist; expected a bundle or an evidence directory")
    if (path / MANIFEST).is_file():
        return [path]
    found = find_bundles(path)
    if not found:
        raise EvidenceInvalid(
            f"no bundle under {str(path)!r} (a bundle is a directory with manifest.json); "
            "expected the directory `acklab run --out DIR` wrote to, or one bundle in it"
        )
    return found


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def evidence() -> None:
    """Verify, merge and pull evidence bundles; convert scanner output to GitLab reports.

    A bundle is one directory per run with manifest.json (sha256 of every file), run.json,
    incidents/, trials/ and reports/. An evidence directory (`acklab run --out DIR`) holds
    several bundles and the journal.
    """


@evidence.command("verify")
@click.argument("path", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object per bundle instead of text.")
@click.option(
    "--journal",
    "with_journal",
    is_flag=True,
    help="Also compare each bundle's manifest with the hash the journal recorded when the bundle "
    "was finalised (catches a bundle rewritten with its manifest recomputed).",
)
def verify_command(path: Path, as_json: bool, with_journal: bool) -> int:
    """Check every file of PATH against its manifest (PATH: a bundle or an evidence directory).

    Exit 0 when every bundle is intact; exit 7 naming, for each bundle, every changed,
    missing or extra file, every symbolic link, and bundles with no manifest (incomplete
    ones). When the evidence directory has a journal, its hash chain is checked too (exit 7
    naming the first entry changed after it was written); with ACKLAB_MANIFEST_KEY set,
    every manifest's signature.
    """
    from acklab.evidence.history import check_chain, printable
    from acklab.evidence.journal import Journal
    from acklab.evidence.tamper import compare, journal_for

    results: list[Verification] = [verify(bundle) for bundle in bundles_in(path)]
    journal_problem: str | None = None
    journal_file = journal_for(path)
    if with_journal and not journal_file.is_file():
        raise EvidenceInvalid(
            f"--journal: no journal at {journal_file}; pass the evidence directory `acklab run --out DIR` wrote to"
        )
    if journal_file.is_file():
        with Journal(journal_file, readonly=True) as journal:
            try:
                check_chain(journal)
            except IntegrityError as exc:
                journal_problem = str(exc)
            if with_journal:
                results = compare(results, journal)
    if as_json:
        click.echo(
            json.dumps(
                [
                    {
                        "bundle": str(r.bundle),
                        "ok": r.ok,
                        "changed": list(r.changed),
                        "missing": list(r.missing),
                        "extra": list(r.extra),
                        "links": list(r.links),
                        "unexpected": list(r.unexpected),
                        "journal": list(r.journal),
                        "signature": r.signature,
                        "problem": r.problem,
                    }
                    for r in results
                ],
                indent=2,
            )
        )
    else:
        for result in results:
            click.echo(f"{printable(str(result.bundle))}: {'intact' if result.ok else 'NOT INTACT'}")
            for line in result.describe():
                click.echo(f"  {printable(line)}")
    bad = [r for r in results if not r.ok]
    if bad and not as_json:
        click.echo(f"{len(bad)} of {len(results)} bundle(s) failed verification", err=True)
    if journal_problem:
        click.echo(f"journal: {journal_problem}", err=True)
    return int(ExitCode.INTEGRITY if bad or journal_problem else ExitCode.OK)


@evidence.command("merge")
@click.argument("inputs", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "--out",
    "out_dir",
    required=True,
    type=EVIDENCE_DIR,
    help="Evidence directory to write the merged bundle into (as OUT/RUN_ID).",
)
@click.option("--run-id", default=None, help="Id of the merged run (default: the shards' common run id).")
def merge_command(inputs: tuple[Path, ...], out_dir: Path, run_id: str | None) -> int:
    """Combine the bundles of parallel CI jobs (shards) into one bundle, without duplicates.

    Each INPUT is a bundle or an evidence directory holding bundles. Every input is verified
    first (a tampered one: exit 7, nothing written). Identical trials are kept once, differing
    ones refused (exit 7); incidents split across shards are recomputed from their trials;
    run.json's verdict combines the experiments' as a run's does (a proven violation outweighs
    an error elsewhere); reports/junit.xml is regenerated; the manifest says kind "merged"
    and lists merged_from. Prints the merged bundle's path.
    """
    from acklab.evidence.merge import merge

    bundles = [bundle for path in inputs for bundle in bundles_in(path)]
    destination = merge(bundles, out_dir, run_id=run_id)
    click.echo(str(destination))
    click.echo(f"merged {len(bundles)} bundle(s) into {destination}", err=True)
    return int(ExitCode.OK)


def gitlab_access(url: str | None, env: Mapping[str, str]) -> GitLabAccess:
    """GitLab URL and token from the environment; tokens are never taken on the command line."""
    url = url or env.get("GITLAB_URL") or env.get("CI_SERVER_URL")
    if not url:
        raise click.UsageError("no GitLab URL: set GITLAB_URL (inside a pipeline CI_SERVER_URL is used)")
    url, removed = strip_credentials(url)
    if removed:
        remember(*removed)
        if not (env.get("GITLAB_TOKEN") or env.get("CI_JOB_TOKEN")):
            raise click.UsageError(
                f"the GitLab URL carries credentials (user:***@); acklab never sends them from a URL: "
                f"set GITLAB_URL={url} and put the token in GITLAB_TOKEN (read_api scope)"
            )
        click.echo(
            "acklab: the GitLab URL's user:password@ is ignored (never sent, never written); "
            "the token comes from GITLAB_TOKEN or CI_JOB_TOKEN",
            err=True,
        )
    if not url.startswith(("http://", "https://")):
        raise click.UsageError(f"GitLab URL {url!r} must start with https:// (or http://)")
    if env.get("GITLAB_TOKEN"):
        return GitLabAccess(url=url.rstrip("/"), token=env["GITLAB_TOKEN"], from_variable="GITLAB_TOKEN")
    if env.get("CI_JOB_TOKEN"):
        return GitLabAccess(
            url=url.rstrip("/"), token=env["CI_JOB_TOKEN"], from_variable="CI_JOB_TOKEN", is_job_token=True
        )
    raise click.UsageError(
        "no GitLab token: set GITLAB_TOKEN (read_api scope), or run inside a pipeline (CI_JOB_TOKEN)"
    )


@evidence.command("pull")
@click.option("--project", required=True, help="Project id or full path (group/project).")
@click.option("--pipeline", type=click.IntRange(min=1), default=None, help="Pipeline id (or --last N).")
@click.option(
    "--last",
    type=click.IntRange(1, 500),
    default=None,
    help="Instead of --pipeline: the last N finished pipelines of --ref (the console's history).",
)
@click.option(
    "--ref",
    default=None,
    help="With --last: the branch whose pipelines to pull (default: $CI_DEFAULT_BRANCH).",
)
@click.option(
    "--exclude",
    type=click.IntRange(min=1),
    multiple=True,
    help="With --last: a pipeline id to leave out (repeatable; e.g. the running pipeline's).",
)
@click.option("--job", "job_name", default=None, help="Only this job's artifacts (exact job name).")
@click.option(
    "--out",
    "out_dir",
    default=Path("out"),
    show_default=True,
    type=EVIDENCE_DIR,
    help="Evidence directory; bundles land in OUT/pipeline-ID/JOB-JOBID/BUNDLE.",
)
@click.option(
    "--gitlab-url",
    default=None,
    help="GitLab base URL (default: $GITLAB_URL, else $CI_SERVER_URL).",
)
@click.option(
    "--max-archive-mib",
    type=click.IntRange(min=1),
    default=1024,
    show_default=True,
    help="Abandon a job's artifact archive that grows past this while downloading.",
)
@click.option(
    "--max-total-mib",
    type=click.IntRange(min=1),
    default=4096,
    show_default=True,
    help="The most one pull downloads, and the most it unpacks, in all.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the stored bundles as JSON.")
def pull_command(
    *,
    project: str,
    pipeline: int | None,
    last: int | None,
    ref: str | None,
    exclude: tuple[int, ...],
    job_name: str | None,
    out_dir: Path,
    gitlab_url: str | None,
    max_archive_mib: int,
    max_total_mib: int,
    as_json: bool,
) -> int:
    """Download a pipeline's evidence artifacts, verify every bundle, store the verified ones.

    The token comes from $GITLAB_TOKEN (a personal or project access token with read_api) or,
    inside a pipeline, $CI_JOB_TOKEN; it is never printed or written. Every bundle found in
    the artifact archives is verified against its manifest first: if one fails, nothing is
    stored and the exit code is 7. Stored bundles carry `pulled_from` in their manifest.
    Exit 4 when GitLab rejects the token or cannot be reached, 3 when the project, pipeline
    or job does not exist. All or nothing: an archive past --max-archive-mib, a pull past
    --max-total-mib, or two bundles that would be stored under one name store nothing (exit 7).

    With --last N, the last N finished pipelines of --ref are pulled one by one, each all or
    nothing as above; a pipeline already under OUT is kept, one without evidence is noted,
    one that fails verification stores nothing and makes the exit code 7 once the others are
    in. --max-total-mib then bounds the whole history.
    """
    from acklab.evidence.pull import PullCaps, pull

    access = gitlab_access(gitlab_url, os.environ)
    caps = PullCaps(download=max_archive_mib << 20, total=max_total_mib << 20)
    if last is not None:
        if pipeline is not None:
            raise click.UsageError("give --pipeline ID or --last N, not both")
        return _pull_history(
            access,
            project=project,
            last=last,
            ref=ref,
            exclude=frozenset(exclude),
            job_name=job_name,
            out_dir=out_dir,
            caps=caps,
            as_json=as_json,
        )
    if pipeline is None:
        raise click.UsageError("give --pipeline ID, or --last N (the last N pipelines of --ref)")
    if ref or exclude:
        raise click.UsageError("--ref and --exclude go with --last N, not with --pipeline")
    pulled = pull(access, project=project, pipeline=pipeline, out_dir=out_dir, job_name=job_name, caps=caps)
    if as_json:
        rows = [
            {"bundle": str(p.path), "bundle_id": p.bundle_id, "job": p.job, "job_id": p.job_id}
            for p in pulled
        ]
        click.echo(json.dumps(rows, indent=2))
    else:
        for item in pulled:
            click.echo(str(item.path))
        click.echo(f"pulled {len(pulled)} verified bundle(s) from pipeline {pipeline}", err=True)
    return int(ExitCode.OK)


def _pull_history(
    access: GitLabAccess,
    *,
    project: str,
    last: int,
    ref: str | None,
    exclude: frozenset[int],
    job_name: str | None,
    out_dir: Path,
    caps: PullCaps,
    as_json: bool,
) -> int:
    from acklab.evidence.pull_history import REFUSED, pull_history

    ref = ref or os.environ.get("CI_DEFAULT_BRANCH")
    if not ref:
        raise click.UsageError("--last needs --ref BRANCH (inside a pipeline $CI_DEFAULT_BRANCH is used)")
    outcomes = pull_history(
        access,
        project=project,
        ref=ref,
        last=last,
        out_dir=out_dir,
        exclude=exclude,
        job_name=job_name,
        caps=caps,
    )
    if as_json:
        rows = [
            {
                "pipeline": o.pipeline,
                "status": o.status,
                "detail": o.detail,
                "bundles": [str(b.path) for b in o.bundles],
            }
            for o in outcomes
        ]
        click.echo(json.dumps(rows, indent=2))
    for o in outcomes:
        click.echo(f"pipeline {o.pipeline}: {o.status}" + (f" ({o.detail})" if o.detail else ""), err=True)
    refused = [o.pipeline for o in outcomes if o.status == REFUSED]
    click.echo(f"{len(outcomes)} pipeline(s) of {ref!r} looked at; history under {out_dir}", err=True)
    if refused:
        raise IntegrityError(
            f"the evidence of pipeline(s) {', '.join(map(str, refused))} failed verification; "
            "nothing of them was stored (the others were)"
        )
    return int(ExitCode.OK)


@evidence.command("sast")
@click.argument("bandit_json", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--out",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="Where to write the GitLab SAST report (e.g. reports/gl-sast-report.json).",
)
def sast_command(bandit_json: Path, out: Path) -> int:
    """Convert bandit's JSON (`bandit -f json -o BANDIT_JSON -r .`) to GitLab's SAST report.

    The report is validated against GitLab's SAST schema 15.2.1 before it is written; point
    `artifacts:reports:sast` at OUT.
    """
    from acklab.evidence.reports.sast import convert_file

    report = convert_file(bandit_json, out)
    click.echo(f"{out}: {len(report['vulnerabilities'])} finding(s), valid GitLab SAST 15.2.1", err=True)
    return int(ExitCode.OK)


@click.command("history", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("run_id")
@click.option(
    "--evidence",
    "evidence_dir",
    default=Path("out"),
    show_default=True,
    type=EVIDENCE_DIR,
    help="The evidence directory whose journal.sqlite to read (`acklab run --out DIR`).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the entries as a JSON array.")
def history(run_id: str, evidence_dir: Path, as_json: bool) -> int:
    """Replay RUN_ID's steps from the journal: kind, name, status, start, end and duration.

    The journal's hash chain is checked first: exit 7 naming the first entry changed after it
    was written. Exit 3 when the run id is unknown (the known ones are listed). Reads only:
    works on a read-only evidence directory.
    """
    entries = load_history(run_id, evidence_dir)
    if as_json:
        # ASCII: every control character (C0 and C1) reaches the terminal as an escape.
        click.echo(json.dumps([e.as_dict() for e in entries], indent=2, ensure_ascii=True))
    else:
        click.echo(render_table(entries))
    return int(ExitCode.OK)
