"""A target spec as served: what depends on where the service runs (its endpoint, its effects
with every ``env:`` read and every URL held to the loopback rule, its command and setup, the
competitor's URL), built from the typed `TargetSpec` once the run placeholders are filled."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from acklab.evidence.redaction import remember
from acklab.harness.errors import HarnessError
from acklab.harness.procs.service_process import Command, Setup
from acklab.harness.sinks import sink_configs
from acklab.harness.specs.credentials import check_wire_value, resolve_env, shown, url_secrets
from acklab.harness.specs.service import Command as CommandSpec
from acklab.harness.specs.service import Setup as SetupSpec
from acklab.harness.specs.target import STAND_INS, HttpEffects, Signing, SinkSection, SqlEffects, TargetSpec
from acklab.harness.targets.effects import database_kind
from acklab.harness.targets.objects import ObjectEvents
from acklab.harness.targets.spec_checks import check_database_url, check_reach, check_url, resolve_cwd
from acklab.harness.wire.signing import SIGNERS


def resolve_headers(headers: Mapping[str, str], *, field_name: str) -> dict[str, str]:
    """A spec's headers with ``env:NAME`` values read; every value becomes a secret (literal too)."""
    resolved = {str(k): resolve_env(str(v), field_name=f"{field_name}.{k}") for k, v in headers.items()}
    remember(*resolved.values())
    for name, value in resolved.items():
        check_wire_value(name, field_name=f"{field_name}.{name}", shown="the header's name")
        check_wire_value(value, field_name=f"{field_name}.{name}", shown="the header's value")
    return resolved


@dataclass(frozen=True)
class ServedEffects:
    """``effects:`` as served: every ``env:`` value read, every URL held to the loopback rule, run
    placeholders filled; the sinks (by name: ``smtp``, ``outbound``, ``provider_api``) as written
    (they listen on loopback only)."""

    sql: SqlEffects | None = None
    http: HttpEffects | None = None
    http_shown: str = ""  # how messages name effects.http.url (its env:NAME when it came from there)
    sinks: Mapping[str, SinkSection] = field(default_factory=dict)

    @property
    def rows(self) -> SqlEffects | HttpEffects:
        """How the event's rows are read (a served spec has exactly one of the two)."""
        if self.sql is not None:
            return self.sql
        if self.http is None:
            raise HarnessError("the target's effects were read before it was served")
        return self.http


@dataclass(frozen=True)
class Served:
    """What depends on where the service is served: endpoint, effects, command (with setup), the
    competitor's URL, and what the incident calls the database."""

    endpoint: str
    effects: ServedEffects
    database: str
    command: Command | None
    competitor_url: str | None


def sql_url(effects: ServedEffects) -> str | None:
    """The database ``effects.sql`` counts in, as served (None: effects are counted over HTTP)."""
    return effects.sql.url if effects.sql is not None else None


def database_server(spec: TargetSpec) -> str | None:
    """``database.url`` read (the server a fresh database per served service is made on)."""
    return resolve_env(spec.database.url, field_name="database.url") if spec.database is not None else None


def served_effects(spec: TargetSpec, *, allow_remote: bool) -> ServedEffects:
    """``effects:`` with every ``env:NAME`` read and every URL held to the loopback rule; the
    sinks as written (they listen on loopback only: `sink_configs` refuses another address
    before anything is served)."""
    effects = spec.effects
    sink_configs(effects, STAND_INS)  # refuses a sink off loopback before anything is served
    sinks = ServedEffects(sinks=effects.sinks)
    http = effects.rows
    if isinstance(http, SqlEffects):
        url = check_database_url(http.url, allow_remote=allow_remote)
        remember(*url_secrets(url))
        return dataclasses.replace(sinks, sql=http.model_copy(update={"url": url}))
    url = check_url(http.url, field_name="effects.http.url", allow_remote=allow_remote, needs_event_id=True)
    headers = resolve_headers(http.headers, field_name="effects.http.headers")
    return dataclasses.replace(
        sinks, http=http.model_copy(update={"url": url, "headers": headers}), http_shown=shown(http.url, url)
    )


def retired_secret(signing: Signing) -> str | None:
    """``signing.rotation.old_secret``: the secret a key rotation retires (read, remembered, checked)."""
    if signing.rotation is None:
        return None
    old = resolve_env(signing.rotation.old_secret, field_name="signing.rotation.old_secret")
    remember(old)
    check_wire_value(old, field_name="signing.rotation.old_secret", shown="the secret")
    SIGNERS[signing.scheme].check_secret(old)
    return old


def served_parts(
    spec: TargetSpec, *, spec_dir: Path, allow_remote: bool, workdir: Path | None = None
) -> Served:
    """What depends on where the service is served: endpoint, effects, command (and setup)."""
    check_reach(spec, allow_remote=allow_remote)
    endpoint = check_url(spec.endpoint, field_name="endpoint", allow_remote=allow_remote)
    effects = served_effects(spec, allow_remote=allow_remote)
    competitor = spec.competitor
    return Served(
        endpoint=endpoint,
        effects=effects,
        database=database_kind(effects.sql.url) if effects.sql is not None else "http",
        command=(
            _command(spec.command, spec.setup, spec_dir=spec_dir, workdir=workdir)
            if spec.command is not None
            else None
        ),
        competitor_url=check_wire_value(
            resolve_env(competitor.url, field_name="competitor.url"), field_name="competitor.url"
        )
        if competitor is not None
        else None,
    )


def with_competitor_url(objects: ObjectEvents, url: str | None) -> ObjectEvents:
    """`objects` with the competitor's URL as served (``env:`` read, run placeholders filled)."""
    if objects.competitor is None or url is None:
        return objects
    return dataclasses.replace(objects, competitor=dataclasses.replace(objects.competitor, url=url))


def _environment(env: Mapping[str, str], where: str) -> dict[str, str]:
    return {name: resolve_env(value, field_name=f"{where}.{name}") for name, value in env.items()}


def _command(
    spec: CommandSpec, setup: SetupSpec | None, *, spec_dir: Path, workdir: Path | None = None
) -> Command:
    cwd = (
        resolve_cwd(spec.cwd, spec_dir=spec_dir, field_name="command.cwd")
        if spec.cwd is not None
        else workdir
    )
    ready = spec.ready
    return Command(
        argv=spec.argv,
        env=_environment(spec.env, "command.env"),
        ready_timeout_s=spec.ready_timeout_s,
        cwd=cwd,
        # check_reach held it to the loopback rule already
        ready_url=resolve_env(ready.url, field_name="command.ready.url") if ready.url is not None else None,
        ready_status=ready.status,
        ready_method=ready.method,
        ready_body=ready.body,
        ready_routes=ready.routes,
        setup=_setup(setup, cwd=cwd) if setup is not None else None,
    )


def _setup(spec: SetupSpec, *, cwd: Path | None) -> Setup:
    return Setup(
        argv=spec.argv,
        env=_environment(spec.env, "setup.env"),
        timeout_s=spec.timeout_s,
        cwd=cwd,
        template=spec.template,
    )
