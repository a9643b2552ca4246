"""``acklab init``: a target spec, a pytest test and a CI snippet for your service, its effect found
by watching its database (`harness.init`). docs/init.md is the reference."""

from __future__ import annotations

import os
import re
import shutil
import sys
from pathlib import Path
from typing import Any

import click

from acklab.evidence.bundle import acklab_version
from acklab.evidence.exitcodes import ExitCode
from acklab.evidence.redaction import remember
from acklab.harness.cli.params import Finite
from acklab.harness.errors import HarnessError, SpecError
from acklab.harness.init.discover import Candidate, Database, Deliverer, Discovery, discover, shown
from acklab.harness.init.examples import PROVIDERS, Example, example
from acklab.harness.init.scaffold import (
    NAME,
    Scaffold,
    ci_text,
    count_query,
    spec_text,
    state_query,
    target_doc,
    test_text,
)
from acklab.harness.specs.credentials import url_secrets
from acklab.harness.specs.load import all_problems, load_spec
from acklab.harness.targets.spec_checks import check_database_url, check_url
from acklab.harness.targets.validate import validate_target
from acklab.harness.wire.conflicts import default_conflict
from acklab.harness.wire.signing import SIGNERS

CONTEXT = {"help_option_names": ["-h", "--help"]}
APP_REF = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _say(message: str) -> None:
    click.echo(message, err=True)


def _relative(path: Path, start: Path) -> str:
    return Path(os.path.relpath(path.resolve(), start.resolve())).as_posix()


def _python() -> str:
    """The program the spec's ``python`` names on this PATH (the project's), else this interpreter."""
    return shutil.which("python") or sys.executable


def _choose(discovery: Discovery, *, yes: bool, interactive: bool) -> Candidate:
    if not discovery.candidates:
        status = discovery.statuses[0]
        refused = status in (400, 401, 403)
        hint = (
            f"it answered {status} to the signed event: check --secret-env (the secret it verifies with) "
            "and --provider"
            if refused
            else f"it answered {status}; is --db the database the service writes to? Or give the query "
            "yourself with --count"
        )
        raise HarnessError(
            "the event changed no table in a way that names it (no new row holds the event id "
            f"{discovery.event_id} or its object id {discovery.object_id}): {hint}"
        )
    if yes:
        return discovery.candidates[0]
    if not interactive:
        raise click.UsageError(
            "init asks before it writes what it found, and there is no terminal to ask on; pass --yes "
            "to take the proposal above"
        )
    if len(discovery.candidates) == 1:
        best = discovery.candidates[0]
        click.confirm(f"count effects in {_where(best)}?", default=True, abort=True, err=True)
        return best
    for n, candidate in enumerate(discovery.candidates, 1):
        _say(f"  {n}. {_where(candidate)}")
    picked = click.prompt(
        "which table holds the effect?",
        type=click.IntRange(1, len(discovery.candidates)),
        default=1,
        err=True,
    )
    return discovery.candidates[int(picked) - 1]


def _where(candidate: Candidate) -> str:
    """``table.column`` as the database named them, escaped for the terminal and the spec."""
    return f"{shown(candidate.table)}.{shown(candidate.column)}"


def _report(discovery: Discovery) -> list[str]:
    """What init saw, for the terminal and the spec's header."""
    lines = [f"deliveries answered: event {discovery.statuses[0]}, duplicate {discovery.statuses[1]}, "
             f"conflicting body {discovery.statuses[2]}"]  # fmt: skip
    for label, found in (
        ("event", discovery.first),
        ("duplicate", discovery.duplicate),
        ("conflict", discovery.conflict),
    ):
        lines += [f"after the {label}: {c.describe()}" for c in found] or [
            f"after the {label}: no table changed"
        ]
    for candidate in discovery.candidates:
        why = "; ".join(candidate.reasons) or "a new row holds the " + candidate.keyed_by + " id"
        lines.append(f"candidate {_where(candidate)} (holds the {candidate.keyed_by} id): {shown(why)}")
    return lines


def _expect(discovery: Discovery | None) -> dict[str, Any]:
    expect: dict[str, Any] = {"max_effects": 1}
    status = discovery.statuses[2] if discovery else None
    if status is not None and 200 <= status < 300:
        expect["conflict"] = "ignore"  # the service acknowledged a conflicting body: dedupe by id
    else:
        rejected = [status] if status in (400, 409, 412, 422) else []
        expect["conflict_status"] = sorted({*rejected, 409, 422})
    return expect


@click.command("init", context_settings=CONTEXT)
@click.option("--url", default=None, metavar="URL", help="The webhook endpoint of your running service.")
@click.option(
    "--app",
    "app_ref",
    default=None,
    metavar="MODULE:APP",
    help="Your ASGI app object (e.g. shop.main:app): the spec serves it with uvicorn on {{port}}.",
)
@click.option(
    "--path",
    "hook_path",
    default=None,
    metavar="PATH",
    help="With --app: the webhook's path (/webhooks/stripe).",
)
@click.option("--provider", type=click.Choice(PROVIDERS), required=True, help="Who sends the webhooks.")
@click.option(
    "--event",
    "event_type",
    default=None,
    metavar="TYPE",
    help="The event (default: the provider's first example).",
)
@click.option(
    "--db",
    default=None,
    metavar="URL",
    help="The service's database (SQLAlchemy URL): init finds the effect in it.",
)
@click.option(
    "--count",
    "count",
    default=None,
    metavar="SQL",
    help="The count query, instead of finding it (with :event_id).",
)
@click.option(
    "--secret-env",
    default=None,
    metavar="NAME",
    help="The variable holding the signing secret (default: NAME_WEBHOOK_SECRET).",
)
@click.option("--name", default=None, help="The target's name (default: the current folder's).")
@click.option(
    "--dir",
    "spec_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("acklab"),
    show_default=True,
)
@click.option(
    "--tests",
    "tests_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("tests"),
    show_default=True,
)
@click.option(
    "--acklab-project",
    default="acme/acklab",
    show_default=True,
    help="Where acklab lives on your GitLab (the CI snippet).",
)
@click.option(
    "--wait",
    type=Finite(0.5, 120),
    default=10.0,
    show_default=True,
    help="Seconds to wait for an effect.",
)
@click.option("--yes", is_flag=True, help="Write what init proposes without asking.")
@click.option("--force", is_flag=True, help="Replace files init wrote before.")
def init(**kwargs: Any) -> int:
    """Write a target spec, a pytest test and a CI snippet for your webhook, its effect found for you.

    Given --db, init delivers one signed event of the provider's published example, then the
    same event again, then a conflicting body, and compares every table of the database
    (read-only) before and after each: the table that gained a row naming the event is the
    effect, and the spec counts it. It prints what it saw and asks before it writes (--yes:
    without asking). Bad input changes nothing.
    """
    url, app_ref, db, count = kwargs["url"], kwargs["app_ref"], kwargs["db"], kwargs["count"]
    if (url is None) == (app_ref is None):
        raise click.UsageError("give either --url (a running service) or --app MODULE:APP (an ASGI app)")
    if app_ref is not None and not APP_REF.match(app_ref):
        raise SpecError(f"--app: got {app_ref!r}; expected MODULE:ATTRIBUTE, e.g. shop.main:app")
    if app_ref is not None and not (kwargs["hook_path"] or "").startswith("/"):
        raise SpecError(
            f"--path: got {kwargs['hook_path']!r}; with --app give the webhook's path, e.g. --path /webhooks"
        )
    if db is None and count is None:
        raise click.UsageError("give --db URL (init finds the effect in that database) or --count QUERY")
    chosen: Example = example(kwargs["provider"], kwargs["event_type"])
    name = kwargs["name"] or re.sub(r"[^A-Za-z0-9._-]+", "-", Path.cwd().name).strip("-._") or "service"
    if not NAME.match(name):
        raise SpecError(f"--name: got {name!r}; letters, digits, '.', '_' and '-', at most 80")
    secret_env = (
        kwargs["secret_env"] or re.sub(r"[^A-Z0-9]+", "_", name.upper()).strip("_") + "_WEBHOOK_SECRET"
    )
    if not ENV_NAME.match(secret_env):
        raise SpecError(f"--secret-env: got {secret_env!r}; expected an environment variable's name")
    secret = os.environ.get(secret_env, "")
    if not secret:
        raise SpecError(
            f"{secret_env} is not set: init signs its deliveries with the secret your service verifies; "
            f"export {secret_env}=... (or name the variable with --secret-env)"
        )
    remember(secret)
    SIGNERS[chosen.provider].check_secret(secret)
    if db is not None:
        check_database_url(db, allow_remote=False, field_name="--db")
        if url_secrets(db):
            raise SpecError(
                "--db: the URL holds a password, which the spec would keep in plain text; put the URL in "
                "a variable and pass --db env:NAME"
            )
    if url is not None:
        check_url(url, field_name="--url", allow_remote=False)

    spec_dir: Path = kwargs["spec_dir"]
    spec_path = spec_dir / f"{name}.target.yaml"
    test_path = kwargs["tests_dir"] / f"test_{re.sub(r'[^0-9a-zA-Z_]', '_', name).lower()}_webhooks.py"
    ci_path = spec_dir / f"{name}.gitlab-ci.yml"
    preview = Scaffold(spec_path, {spec_path: "", test_path: "", ci_path: ""})
    preview.refuse_existing(force=kwargs["force"])

    template = chosen.template()
    conflict = default_conflict(template, chosen.provider)
    command: dict[str, Any] | None = None
    if app_ref is not None:
        endpoint = f"http://127.0.0.1:{{{{port}}}}{kwargs['hook_path']}"
        command = {
            "argv": ["python", "-m", "uvicorn", app_ref, "--host", "127.0.0.1", "--port", "{{port}}"],
            "cwd": _relative(Path.cwd(), Path.cwd() / spec_dir),
        }
    else:
        endpoint = url

    discovery: Discovery | None = None
    if count is None:
        discovery = _discover(
            kwargs, chosen=chosen, template=template, conflict=conflict, secret=secret, command=command
        )
        seen = _report(discovery)
        for line in seen:
            _say(f"  {line}")
        best = _choose(discovery, yes=kwargs["yes"], interactive=sys.stdin.isatty())
        prefix = chosen.object_prefix() if best.keyed_by == "object" else ""
        if best.keyed_by == "object" and chosen.object_id:
            # The object is named by the event id: the count filters on it with :event_id alone.
            from acklab.harness.wire.templates import set_path

            set_path(template, chosen.object_id, f"{prefix}{{{{event_id}}}}")
        effects: dict[str, Any] = {"url": db, "count": count_query(best, prefix)}
        state = state_query(best, prefix)
        if state:
            effects["state"] = state
        _say(f"proposed effects.sql.count: {shown(effects['count'])}")
        if state:
            _say(f"proposed effects.sql.state: {shown(state)}")
    else:
        seen = ["(not looked at: --count given)"]
        effects = {"url": db or "env:SERVICE_DB_URL", "count": count}

    doc = target_doc(
        name=name,
        example=chosen,
        endpoint=endpoint,
        secret_env=secret_env,
        effects=effects,
        command=command,
        expect=_expect(discovery),
        template=template,
    )
    files = {
        spec_path: spec_text(doc, example=chosen, seen=seen),
        test_path: test_text(name=name, spec_rel=_relative(spec_path, test_path.parent), app_ref=app_ref),
        ci_path: ci_text(
            name=name,
            spec_rel_root=spec_path.as_posix(),
            secret_env=secret_env,
            project=kwargs["acklab_project"],
            version=acklab_version(),
        ),
    }

    def check(staged: Path) -> None:
        problems = all_problems(staged)
        if problems:
            raise SpecError(f"init wrote a spec acklab validate refuses (a bug of init): {problems[0]}")
        _, checked = load_spec(staged)
        validate_target(checked, source=str(spec_path), allow_unset=False, allow_remote=False)

    written = Scaffold(spec_path, files).write(check)
    for path in written:
        _say(f"wrote {path}")
    _say(f"next: acklab validate {spec_path}; acklab run --target {spec_path}; pytest {test_path}")
    return int(ExitCode.OK)


def _discover(
    kwargs: dict[str, Any],
    *,
    chosen: Example,
    template: dict[str, Any],
    conflict: dict[str, Any],
    secret: str,
    command: dict[str, Any] | None,
) -> Discovery:
    """Serve the app (--app) or use the running service (--url), and watch the database."""
    from acklab.harness.ports import free_port
    from acklab.harness.procs.service_process import Command, ServiceProcess
    from acklab.harness.specs.credentials import resolve_env

    service = None
    url = kwargs["url"]
    if command is not None:
        port = free_port()
        url = f"http://127.0.0.1:{port}{kwargs['hook_path']}"
        argv = tuple(str(a).replace("{{port}}", str(port)) for a in command["argv"])
        service = ServiceProcess(Command(argv=(_python(), *argv[1:]), cwd=Path.cwd()), url, name="init")
        _say(f"serving {kwargs['app_ref']} with uvicorn on 127.0.0.1:{port}")
        service.start()
    database = Database(resolve_env(kwargs["db"], field_name="--db"))
    deliverer = Deliverer(url, chosen.provider, secret, event_type=chosen.event_type, headers={})
    try:
        return discover(database, deliverer, template, conflict_set=conflict, wait_s=kwargs["wait"], say=_say)
    finally:
        deliverer.close()
        database.close()
        if service is not None:
            service.stop()
            service.remove_logs()
