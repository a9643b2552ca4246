"""The checks of a target spec a JSON Schema cannot express, shared by `acklab validate` and `run`.

* `check_target_doc`: the event template (placeholders, where the event id is), the
  ``conflict.set`` paths resolved against a rendered event, the ``headers:`` a spec may set,
  and contradictions in ``expect:`` and ``command:`` (`check_expect`).
* `check_reach`: every URL the lab will contact (endpoint, effects URLs, ready URL) is on
  the loopback range unless ``--allow-remote`` (exit 5, as ``run`` refuses it).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from acklab.harness.errors import RemoteRefused, SpecError
from acklab.harness.specs.credentials import ENV_REF, check_wire_value, resolve_env, shown
from acklab.harness.specs.target import TargetSpec
from acklab.harness.targets.base import check_local, is_loopback
from acklab.harness.targets.objects import check_objects
from acklab.harness.wire.conflicts import LAST_RESORT, default_conflict, value_at
from acklab.harness.wire.providers import PROVIDERS, provider
from acklab.harness.wire.signing import SIGNERS
from acklab.harness.wire.templates import KNOWN, conflicting, render, unknown_placeholders

DEFAULT_CONFLICT = LAST_RESORT  # the last resort of `default_conflict` (harness.wire.conflicts)
# Set by the lab's HTTP client for every request: a spec may not send its own.
CLIENT_HEADERS = frozenset({"host", "content-length", "transfer-encoding", "connection", "expect", "upgrade"})
# The providers' event-type headers: set from delivery.event_type, never by a spec's headers:.
EVENT_TYPE_HEADERS = frozenset(p.event_type_header.lower() for p in PROVIDERS.values() if p.event_type_header)
EVENT_ID = re.compile(r"\{\{\s*event_id\s*\}\}")
PROBE_KEY = re.compile(r"\{\{\s*(event_id|object_id)\s*\}\}")  # what an effects URL reads one of


def _mentions_event_id(template: Any) -> bool:
    if isinstance(template, dict):
        return any(_mentions_event_id(v) for v in template.values())
    if isinstance(template, list):
        return any(_mentions_event_id(v) for v in template)
    return isinstance(template, str) and EVENT_ID.search(template) is not None


def sample_event(template: Mapping[str, Any]) -> Any:
    """The template rendered with stand-in values (what `conflict.set` paths are resolved against)."""
    return render(
        template,
        event_id="evt_acklab_check",
        order_id="ord_acklab_check",
        seq=1,
        created=datetime(2024, 1, 1, tzinfo=UTC),
    )


def conflict_set(spec: TargetSpec) -> dict[str, Any]:
    """The spec's ``conflict.set``, else the one default derived from its event body and provider
    (`harness.wire.conflicts.default_conflict`): the same in a spec file and in ``acklab.attack()``."""
    if spec.conflict is not None and spec.conflict.set:
        return dict(spec.conflict.set)
    return default_conflict(spec.event, spec.signing.scheme)


def check_headers(headers: Mapping[str, str], *, scheme: str, field_name: str) -> None:
    """A spec's own headers may not replace what the client or the provider's signer sets."""
    signer = SIGNERS[scheme]
    for name in headers:
        lowered = name.lower()
        if lowered in CLIENT_HEADERS:
            raise SpecError(f"{field_name}.{name}: the HTTP client sets {name} itself; remove it")
        if lowered in signer.derived:
            hint = "set delivery.event_type instead" if lowered in EVENT_TYPE_HEADERS else "remove it"
            raise SpecError(
                f"{field_name}.{name}: the {scheme!r} signing scheme sends {name} itself "
                f"(from the event, the attempt or the secret); {hint}"
            )


def check_target_doc(spec: TargetSpec, *, source: str) -> None:
    """Placeholders, the event id's place, the conflict paths and the headers (exit 3)."""
    scheme = spec.signing.scheme
    unknown = unknown_placeholders(spec.event)
    if unknown:
        raise SpecError(
            f"{source}: {unknown[0]}: unknown placeholder; use one of {', '.join('{{' + k + '}}' for k in KNOWN)}"
        )
    if not _mentions_event_id(spec.event):
        raise SpecError(
            f'{source}: event: no {{{{event_id}}}} in the template; add e.g. id: "{{{{event_id}}}}"'
        )
    where = provider(scheme).body_event_id
    if where is not None:
        found, value = value_at(spec.event, where)
        if value != "{{event_id}}":
            raise SpecError(
                f"{source}: event.{where}: got {value if found else None!r}; {provider(scheme).profile.name} "
                f'carries the event id in the body: set {where}: "{{{{event_id}}}}"'
            )
    changes = conflict_set(spec)
    try:
        conflicting(sample_event(spec.event), changes)
    except SpecError as exc:
        raise SpecError(f"{source}: {exc}") from None
    check_headers(spec.headers, scheme=scheme, field_name=f"{source}: headers")
    http = spec.effects.http
    if http is not None:
        check_headers(http.headers, scheme="none", field_name=f"{source}: effects.http.headers")
    check_expect(spec, source=source)
    check_objects(spec, source=source)  # lifecycle:, siblings:, competitor: (harness.targets.objects)


def check_expect(spec: TargetSpec, *, source: str) -> None:
    """Refuse (exit 3) an ``expect:`` or ``command:`` that contradicts itself or cannot work."""
    expect = spec.expect
    if expect.conflict == "ignore" and "conflict_status" in expect.model_fields_set:
        raise SpecError(
            f"{source}: expect: conflict: ignore says a conflicting body is answered 2xx (dedupe by id), but "
            f"conflict_status {list(expect.conflict_status)!r} lists the statuses that reject it; remove "
            "conflict_status, or set conflict: reject"
        )
    command = spec.command
    if command is None:
        return
    cwd = command.cwd
    if cwd is not None and not ENV_REF.match(cwd) and not (Path(source).parent / cwd).is_dir():
        raise SpecError(
            f"{source}: command.cwd: got {cwd!r}, which is not a directory ({Path(source).parent / cwd}); "
            "a relative cwd is read from the spec file's folder"
        )
    statuses = list(command.ready.status)
    if statuses and all(s in (502, 503, 504) for s in statuses):
        raise SpecError(
            f"{source}: command.ready.status: got {statuses!r}; 502, 503 and 504 are what a booting service "
            "or its proxy answers, not readiness; use the status the service answers once it is up (e.g. [200])"
        )


def check_url(value: str, *, field_name: str, allow_remote: bool, needs_event_id: bool = False) -> str:
    """Resolve an http(s) URL of the spec (``env:NAME`` or literal) and hold it to the loopback rule."""
    resolved = resolve_env(value, field_name=field_name)
    check_wire_value(resolved, field_name=field_name, shown=shown(value, "the URL"))
    check_local(resolved, field_name=field_name, allow_remote=allow_remote, shown=shown(value, resolved))
    try:
        port = urlsplit(resolved).port
    except ValueError:
        port = -1
    check_port(port, field_name=field_name, shown=shown(value, "the URL"))
    if needs_event_id and not PROBE_KEY.search(resolved):
        raise SpecError(
            f"{field_name}: {shown(value, '<the URL>')} has no {{{{event_id}}}} (or {{{{object_id}}}}); the probe "
            "reads one event's effects, e.g. http://127.0.0.1:9000/effects/{{event_id}}"
        )
    return resolved


def check_port(port: int | None, *, field_name: str, shown: str) -> None:
    """A URL's port, when it names one, is 1-65535 (exit 3 naming the field); -1: unreadable."""
    if port is not None and not 1 <= port <= 65535:
        raise SpecError(
            f"{field_name}: {shown} names a port outside 1-65535; give the port the service listens on "
            "(or {{port}} for one the lab picks)"
        )


def check_database_url(value: str, *, allow_remote: bool, field_name: str = "effects.sql.url") -> str:
    """Resolve ``effects.sql.url`` (or `field_name`) and hold its server to the loopback rule
    (SQLite files are local)."""
    resolved = resolve_env(value, field_name=field_name)
    check_wire_value(resolved, field_name=field_name, shown=shown(value, "the URL"))
    try:
        url = make_url(resolved)
    except (ArgumentError, ValueError) as exc:
        raise SpecError(
            f"{field_name}: {shown(value, 'the value')} is not a SQLAlchemy URL; expected e.g. "
            "sqlite:////tmp/shop.db or postgresql://user:pass@127.0.0.1:5432/shop"
        ) from exc
    check_port(url.port, field_name=field_name, shown=shown(value, "the URL"))
    backend = url.get_backend_name()
    if backend not in ("sqlite", "postgresql"):
        raise SpecError(
            f"{field_name}: got a {backend!r} URL; acklab reads effects from SQLite or PostgreSQL only "
            "(on a read-only connection), or from an effects endpoint (effects.http)"
        )
    socket_dir = url.query.get("host")
    host = url.host or (socket_dir if isinstance(socket_dir, str) else None)
    local = backend == "sqlite" or host is None or host.startswith("/") or is_loopback(host)
    if not allow_remote and not local:
        raise RemoteRefused(
            f"{field_name} ({shown(value, 'its host')}) names the database server {host!r}, off the loopback "
            "range; acklab reads only local databases. Pass --allow-remote if you own it."
        )
    return resolved


def is_unset(value: str) -> bool:
    """Whether `value` names an environment variable that is unset or empty (``env:NAME``)."""
    match = ENV_REF.match(value)
    return match is not None and not os.environ.get(match.group(1))


def _given(value: str | None, skip_unset: bool) -> str | None:
    return None if value is None or (skip_unset and is_unset(value)) else value


def check_wire_fields(spec: TargetSpec, *, skip_unset: bool = False) -> None:
    """The signing secret and every header the spec sends, resolved and held to the one-line,
    bounded rule (`check_wire_value`, exit 3); the URLs are `check_reach`'s. `skip_unset`: a value
    naming an unset variable is not checked (`acklab validate --allow-unset` lists it instead)."""
    secret = _given(spec.signing.secret, skip_unset)
    if secret is not None:
        check_wire_value(
            resolve_env(secret, field_name="signing.secret"), field_name="signing.secret", shown="the secret"
        )
    competitor = spec.competitor
    for where, headers in (
        ("headers", spec.headers),
        ("effects.http.headers", spec.effects.http.headers if spec.effects.http is not None else {}),
        ("competitor.headers", competitor.headers if competitor is not None else {}),
    ):
        for name, value in headers.items():
            if skip_unset and is_unset(value):
                continue
            resolved = resolve_env(value, field_name=f"{where}.{name}")
            check_wire_value(name, field_name=f"{where}.{name}", shown="the header's name")
            check_wire_value(resolved, field_name=f"{where}.{name}", shown="the header's value")


def check_reach(spec: TargetSpec, *, allow_remote: bool, skip_unset: bool = False) -> None:
    """Every URL the lab will contact, resolved and held to the loopback rule (exit 5 off it).

    `skip_unset`: a URL naming an unset variable is skipped (`acklab validate --allow-unset` lists it).
    """

    def _set(value: str | None) -> str | None:
        return _given(value, skip_unset)

    if (endpoint := _set(spec.endpoint)) is not None:
        check_url(endpoint, field_name="endpoint", allow_remote=allow_remote)
    http, sql = spec.effects.http, spec.effects.sql
    if http is not None and (url := _set(http.url)) is not None:
        check_url(url, field_name="effects.http.url", allow_remote=allow_remote, needs_event_id=True)
    if sql is not None and (url := _set(sql.url)) is not None:
        check_database_url(url, allow_remote=allow_remote)
    if spec.database is not None and (server := _set(spec.database.url)) is not None:
        url = check_database_url(server, allow_remote=allow_remote, field_name="database.url")
        if not url.startswith(("postgresql", "postgres")):
            raise SpecError(
                f"database.url: got a {url.split(':', 1)[0]!r} URL; the lab creates a database per service on a "
                "PostgreSQL server only (postgresql://user@127.0.0.1:5432/postgres)"
            )
    if spec.command is not None and (ready := _set(spec.command.ready.url)) is not None:
        check_url(ready, field_name="command.ready.url", allow_remote=allow_remote)
    competitor = spec.competitor
    if competitor is not None and (url := _set(competitor.url)) is not None and not url.startswith("/"):
        check_url(url, field_name="competitor.url", allow_remote=allow_remote)  # a path: the endpoint's host


def resolve_cwd(value: str, *, spec_dir: Path, field_name: str) -> Path:
    """A ``cwd:`` (``command:``, ``workers:``) read from the environment when it says ``env:``, relative
    to the spec file: a spec committed beside the service names its folder."""
    cwd = (spec_dir / resolve_env(value, field_name=field_name)).resolve()
    if not cwd.is_dir():
        raise SpecError(
            f"{field_name}: got {value!r}, which is not a directory ({cwd}); a relative cwd is "
            "read from the spec file's folder"
        )
    return cwd
