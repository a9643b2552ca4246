"""``acklab init``: a target spec, a pytest test and a CI snippet for your service, its effect found
by watching its database (`harness.init`). docs/init.md is the reference."""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

from acklab.evidence.bundle import acklab_version
from acklab.evidence.exitcodes import ExitCode
from acklab.evidence.redaction import redact, remember
from acklab.harness.cli.params import Finite
from acklab.harness.errors import HarnessError, SpecError
from acklab.harness.init.discover import Candidate, Database, Deliverer, Discovery, discover, fresh_ids, shown
from acklab.harness.init.examples import PROVIDERS, Example, example, from_file, object_prefix
from acklab.harness.init.examples import template as template_of
from acklab.harness.init.heard import Heard, listen_for, unseen
from acklab.harness.init.project import Project, detect
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
from acklab.harness.init.serving import PLACEHOLDERS, Serving, python, served, serving
from acklab.harness.specs.credentials import url_secrets
from acklab.harness.specs.load import all_problems
from acklab.harness.specs.service import Setup
from acklab.harness.specs.target import (
    Effects,
    Expect,
    OutboundEffects,
    SmtpEffects,
    SqlEffects,
    load_target_spec,
)
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


def _choose(
    discovery: Discovery, *, yes: bool, interactive: bool, event: str, heard: Heard | None, served: bool
) -> Candidate:
    if not discovery.candidates:
        status = discovery.statuses[0]
        refused = status in (400, 401, 403)
        silent = heard is None or not (heard.emails.get("event") or heard.calls.get("event"))
        if status is not None and 200 <= status < 300 and not discovery.first and silent:
            raise HarnessError(
                f"the service answered {status} to {event} and changed nothing (no table, no email, no call): "
                "does it ignore that type? Pass one of your own events with --example FILE (a body from "
                "the provider's dashboard or your app's log), or another --event TYPE"
            )
        hint = (
            f"it answered {status} to the signed event: check --secret-env (the secret it verifies with) "
            "and --provider"
            if refused
            else f"it answered {status}; the service itself was given a database of its own, so give the "
            "query yourself with --count"
            if served
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


def _expect(discovery: Discovery | None, heard: Mapping[str, int]) -> Expect:
    """``expect:``: one effect per event, the conflict as the service answered it, and at most as
    many of each sink's effects as the event had (`heard`, by source: ``expect.max_<source>``)."""
    status = discovery.statuses[2] if discovery else None
    if status is not None and 200 <= status < 300:
        # the service acknowledged a conflicting body: dedupe by id
        expect = Expect(max_effects=1, conflict="ignore")
    else:
        rejected = [status] if status in (400, 409, 412, 422) else []
        expect = Expect(max_effects=1, conflict_status=tuple(sorted({*rejected, 409, 422})))
    if not heard:
        return expect
    # A sink's expectation is named by its source, as the sinks registry declares it.
    return Expect.model_validate({**expect.dump(), **{f"max_{source}": n for source, n in heard.items()}})


@click.command("init", context_settings=CONTEXT)
@click.option("--url", default=None, metavar="URL", help="The webhook endpoint of your running service.")
@click.option(
    "--app",
    "app_ref",
    default=None,
    metavar="MODULE:APP",
    help="Your app (ASGI or WSGI: shop.main:app, shop.wsgi:application): init serves it on a port, "
    "with a database and sinks of its own, and so does the spec.",
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
    help="The event type (default: the provider's first example; any type of yours).",
)
@click.option(
    "--example",
    "example_file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    metavar="FILE",
    help="One of your own events (JSON, from the provider's dashboard or your app's log) to start from.",
)
@click.option(
    "--db",
    default=None,
    metavar="URL",
    help="--url: the service's database (SQLAlchemy URL), where init finds the effect. --app: the "
    "database the app uses (its file name is kept; the served app gets its own).",
)
@click.option(
    "--db-env",
    default=None,
    metavar="NAME",
    help="--app: the variable the app reads its database from (default: found in its settings or code).",
)
@click.option(
    "--outbound-env",
    multiple=True,
    metavar="NAME",
    help="--app: a variable holding the base URL of an API the app calls (the lab's API sink goes there).",
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
@click.option(
    "--yes", is_flag=True, help="Write what init proposes (and, with --url, deliver) without asking."
)
@click.option("--force", is_flag=True, help="Replace files init wrote before.")
def init(**kwargs: Any) -> int:
    """Write a target spec, a pytest test and a CI snippet for your webhook, its effects found for you.

    With --app, init serves your app as the spec will: on a port of its own, its database in a
    scratch directory (migrated by the setup it detects: manage.py migrate, alembic upgrade head),
    its mail and API calls pointed at the lab's SMTP and API sinks; your own database is never
    touched. With --url (a running service) it says which database it will write to and asks.
    It delivers one signed event, the same event again and a conflicting body, compares every
    table (read-only) before and after each and listens to the sinks: the table that gained a
    row naming the event, and the emails and calls naming it, are what the spec counts. It prints
    what it saw and asks before it writes (--yes: without asking). Bad input changes nothing.
    """
    app_ref = kwargs["app_ref"]
    _check_options(kwargs)
    chosen: Example = (
        from_file(kwargs["example_file"], kwargs["provider"], kwargs["event_type"])
        if kwargs["example_file"] is not None
        else example(kwargs["provider"], kwargs["event_type"])
    )
    name, secret_env, secret = _identity(kwargs, chosen)
    spec_dir: Path = kwargs["spec_dir"]
    spec_path = spec_dir / f"{name}.target.yaml"
    test_path = kwargs["tests_dir"] / f"test_{re.sub(r'[^0-9a-zA-Z_]', '_', name).lower()}_webhooks.py"
    ci_path = spec_dir / f"{name}.gitlab-ci.yml"
    preview = Scaffold(spec_path, {spec_path: "", test_path: "", ci_path: ""})
    preview.refuse_existing(force=kwargs["force"])

    template = template_of(chosen)
    conflict = default_conflict(template, chosen.provider)
    notes: list[str] = []
    project, how, endpoint = _serving_plan(kwargs, secret_env=secret_env, notes=notes)
    found = _found(
        kwargs, chosen=chosen, template=template, conflict=conflict, secret=secret, project=project, how=how
    )
    sinks = _sinks(found.heard, object_match=found.object_match, project=project, notes=notes)
    for note in notes:
        _say(f"note: {shown(note)}")
    command = (
        how.command_section(mail=sinks.smtp is not None, outbound=sinks.outbound is not None, project=project)
        if how is not None and project is not None
        else None
    )
    doc = target_doc(
        name=name,
        example=chosen,
        endpoint=endpoint,
        secret_env=secret_env,
        effects=Effects(sql=found.effects, smtp=sinks.smtp, outbound=sinks.outbound),
        command=command,
        expect=_expect(found.discovery, sinks.counts),
        template=template,
        setup=Setup(argv=tuple(how.setup)) if how is not None and how.setup else None,
    )
    files = {
        spec_path: spec_text(doc, example=chosen, seen=[*found.seen, *(f"note: {n}" for n in notes)]),
        test_path: test_text(
            name=name,
            spec_rel=_relative(spec_path, test_path.parent),
            app_ref=app_ref,
            served=command is not None,
        ),
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
        validate_target(
            load_target_spec(staged), source=str(spec_path), allow_unset=False, allow_remote=False
        )

    written = Scaffold(spec_path, files).write(check)
    for path in written:
        _say(f"wrote {path}")
    _say(f"next: acklab validate {spec_path}; acklab run --target {spec_path}; pytest {test_path}")
    return int(ExitCode.OK)


def _check_options(kwargs: dict[str, Any]) -> None:
    """The options that contradict each other or name what cannot be: usage errors and exit 3."""
    url, app_ref, db, count = kwargs["url"], kwargs["app_ref"], kwargs["db"], kwargs["count"]
    if (url is None) == (app_ref is None):
        raise click.UsageError("give either --url (a running service) or --app MODULE:APP (your app)")
    if app_ref is not None and not APP_REF.match(app_ref):
        raise SpecError(f"--app: got {app_ref!r}; expected MODULE:ATTRIBUTE, e.g. shop.main:app")
    if app_ref is not None and not (kwargs["hook_path"] or "").startswith("/"):
        raise SpecError(
            f"--path: got {kwargs['hook_path']!r}; with --app give the webhook's path, e.g. --path /webhooks"
        )
    if url is not None and db is None and count is None:
        raise click.UsageError("give --db URL (init finds the effect in that database) or --count QUERY")
    for option in ("db_env", *(["outbound_env"] if kwargs["outbound_env"] else [])):
        for value in [kwargs[option]] if isinstance(kwargs[option], str | None) else kwargs[option]:
            if value is not None and not ENV_NAME.match(value):
                raise SpecError(f"--{option.replace('_', '-')}: got {value!r}; expected a variable's name")
    if db is not None:
        check_database_url(db, allow_remote=False, field_name="--db")
        if url_secrets(db):
            raise SpecError(
                "--db: the URL holds a password, which the spec would keep in plain text; put the URL in "
                "a variable and pass --db env:NAME"
            )
    if url is not None:
        check_url(url, field_name="--url", allow_remote=False)


def _identity(kwargs: dict[str, Any], chosen: Example) -> tuple[str, str, str]:
    """The spec's name, the variable its secret is read from, and the secret (checked for its scheme)."""
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
    return name, secret_env, secret


def _serving_plan(
    kwargs: dict[str, Any], *, secret_env: str, notes: list[str]
) -> tuple[Project | None, Serving | None, str]:
    """The project and how init serves it (--app), and the endpoint the spec names; a running
    service (--url) is asked about first."""
    app_ref, db, url = kwargs["app_ref"], kwargs["db"], kwargs["url"]
    if app_ref is None:
        _ask_before_delivering(
            url, db, yes=kwargs["yes"], interactive=sys.stdin.isatty(), counting=kwargs["count"]
        )
        notes += unseen(["emails", "calls"])
        return None, None, str(url)
    interpreter = python()
    project = detect(
        interpreter,
        Path.cwd(),
        app_ref,
        db_env=kwargs["db_env"],
        db_file=db if db is not None and db.startswith("sqlite") else None,
        outbound_env=tuple(kwargs["outbound_env"]),
        secret_env=secret_env,
    )
    how, framework = serving(project, interpreter=interpreter, spec_dir=kwargs["spec_dir"])
    notes += [
        f"{framework or 'the app'} served by {' '.join(how.argv[:3])} on {{{{port}}}}, its database in "
        f"{{{{scratch}}}} ({project.database.variable}), never yours",
        *project.notes,
    ]
    return project, how, f"http://127.0.0.1:{{{{port}}}}{kwargs['hook_path']}"


@dataclass
class _Found:
    """What init's deliveries found (or what --count said): the effects section and what was seen."""

    effects: SqlEffects
    seen: list[str]
    discovery: Discovery | None = None
    heard: Heard | None = None
    object_match: str = "{{order_id}}"


def _found(
    kwargs: dict[str, Any],
    *,
    chosen: Example,
    template: dict[str, Any],
    conflict: dict[str, Any],
    secret: str,
    project: Project | None,
    how: Serving | None,
) -> _Found:
    """Deliver, watch the database and the sinks, and propose ``effects.sql`` (and keep the template's
    object named by the event where the table is keyed by the object)."""
    # The database the spec counts in: the app's own, as init serves it, or the one --db names.
    url = project.database_url(PLACEHOLDERS) if project is not None else kwargs["db"] or "env:SERVICE_DB_URL"
    count = kwargs["count"]
    if count is not None:
        return _Found(SqlEffects(url=url, count=count), ["(not looked at: --count given)"])
    discovery, heard = _discover(
        kwargs, chosen=chosen, template=template, conflict=conflict, secret=secret, project=project, how=how
    )
    seen = _report(discovery) + (heard.lines() if heard is not None else [])
    for line in seen:
        _say(f"  {line}")
    best = _choose(
        discovery,
        yes=kwargs["yes"],
        interactive=sys.stdin.isatty(),
        event=chosen.event,
        heard=heard,
        served=project is not None,
    )
    prefix = object_prefix(chosen) if best.keyed_by == "object" else ""
    object_match = "{{order_id}}"
    if best.keyed_by == "object" and chosen.object_id:
        # The object is named by the event id: the count filters on it with :event_id alone.
        from acklab.harness.wire.templates import set_path

        set_path(template, chosen.object_id, f"{prefix}{{{{event_id}}}}")
        if "{{order_id}}" not in json.dumps(template):  # what named the object names the event now
            object_match = f"{prefix}{{{{event_id}}}}"
    # no state query: state stays None, which the spec written leaves out
    effects = SqlEffects(url=url, count=count_query(best, prefix), state=state_query(best, prefix) or None)
    _say(f"proposed effects.sql.count: {shown(effects.count)}")
    if effects.state:
        _say(f"proposed effects.sql.state: {shown(effects.state)}")
    return _Found(effects, seen, discovery, heard, object_match)


@dataclass(frozen=True)
class _HeardSinks:
    """``effects.smtp`` / ``outbound`` as the sinks heard the app, and at most how many effects of
    each source one event had there (``expect.max_<source>``)."""

    smtp: SmtpEffects | None = None
    outbound: OutboundEffects | None = None
    counts: Mapping[str, int] = field(default_factory=dict)


def _sinks(
    heard: Heard | None, *, object_match: str, project: Project | None, notes: list[str]
) -> _HeardSinks:
    """``effects.smtp`` / ``outbound`` as the sinks heard the app (and their ``expect.max_*``)."""
    if heard is None:
        return _HeardSinks()
    smtp, emails = heard.smtp("127.0.0.1:{{smtp_port}}", object_match=object_match)
    outbound, calls = heard.outbound("127.0.0.1:{{outbound_port}}", object_match=object_match)
    counts: dict[str, int] = {}
    if smtp is not None:
        counts[smtp.SOURCE] = emails
        _say(f"proposed effects.smtp: match {smtp.match} (at most {emails} email(s) per event)")
    if outbound is not None:
        counts[outbound.SOURCE] = calls
        _say(
            f"proposed effects.outbound: {len(outbound.routes)} route(s) (at most {calls} call(s) per event)"
        )
    notes += heard.blind_spots()
    if smtp is None and not heard.blind_spots() and project is not None:
        notes.append(
            f"init saw no email: if the app sends some, add effects.smtp and {project.mail[1]}: "
            "'{{smtp_port}}' under command.env (docs/sinks.md)"
        )
    return _HeardSinks(smtp, outbound, counts)


def _ask_before_delivering(
    url: str, db: str | None, *, yes: bool, interactive: bool, counting: str | None
) -> None:
    """A running service writes what init's deliveries cause into its own database: say which, and ask."""
    if counting is not None:
        return  # nothing is delivered
    where = f"into {redact(db)}" if db else "into its database"
    said = (
        f"init will deliver 3 signed events to {redact(url)}; the service writes what they cause {where}, "
        "and those rows stay there (with --app, init serves your app on a database of its own instead)"
    )
    _say(said)
    if yes:
        return
    if not interactive:
        raise click.UsageError(
            "init asks before it delivers to a running service, and there is no terminal to ask on; pass "
            "--yes to deliver, or use --app to let init serve the app on a database of its own"
        )
    click.confirm("deliver them?", default=False, abort=True, err=True)


def _discover(
    kwargs: dict[str, Any],
    *,
    chosen: Example,
    template: dict[str, Any],
    conflict: dict[str, Any],
    secret: str,
    project: Project | None,
    how: Serving | None,
) -> tuple[Discovery, Heard | None]:
    """Serve the app (--app: with its own database and the sinks) or use the running service (--url),
    and watch the database (and the sinks)."""
    from acklab.harness.specs.credentials import resolve_env

    ids = fresh_ids()
    headers: dict[str, Any] = {"event_type": chosen.event_type, "headers": {}}
    if project is None or how is None:
        database = Database(resolve_env(kwargs["db"], field_name="--db"))
        deliverer = Deliverer(kwargs["url"], chosen.provider, secret, **headers)
        try:
            found = discover(
                database, deliverer, template, conflict_set=conflict, wait_s=kwargs["wait"], say=_say,
                ids=ids, event_type=chosen.event,
            )  # fmt: skip
        finally:
            deliverer.close()
            database.close()
        return found, None
    with served(project, how, hook_path=kwargs["hook_path"], interpreter=python(), say=_say) as app:
        heard = Heard(*ids)
        listen_for(app.sinks, *ids)
        database = Database(app.database_url)
        deliverer = Deliverer(app.url, chosen.provider, secret, **headers)
        try:
            found = discover(
                database, deliverer, template, conflict_set=conflict, wait_s=kwargs["wait"], say=_say,
                ids=ids, mark=lambda phase: heard.mark(app.sinks, phase), log_tail=app.log_tail,
                event_type=chosen.event,
            )  # fmt: skip
        finally:
            deliverer.close()
            database.close()
    return found, heard
