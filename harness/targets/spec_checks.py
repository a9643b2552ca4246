"""The checks of a target spec a JSON Schema cannot express, shared by `acklab validate` and `run`.

* `check_target_doc`: the event template (placeholders, where the event id is), the
  ``conflict.set`` paths resolved against a rendered event, the ``headers:`` a spec may set,
  and contradictions in ``expect:`` and ``command:`` (`check_expect`).
* `check_reach`: every URL the lab will contact (endpoint, effects URLs, ready URL) is on
  the loopback range unless ``--allow-remote`` (exit 5, as ``run`` refuses it).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from acklab.harness.errors import RemoteRefused, SpecError
from acklab.harness.specs.credentials import ENV_REF, check_wire_value, resolve_env
from acklab.harness.targets.base import check_local, is_loopback
from acklab.harness.targets.objects import check_objects
from acklab.harness.wire.conflicts import LAST_RESORT, default_conflict
from acklab.harness.wire.signing import SIGNERS
from acklab.harness.wire.templates import KNOWN, conflicting, render, unknown_placeholders

DEFAULT_CONFLICT = LAST_RESORT  # the last resort of `default_conflict` (harness.wire.conflicts)
# Set by the lab's HTTP client for every request: a spec may not send its own.
CLIENT_HEADERS = frozenset({"host", "content-length", "transfer-encoding", "connection", "expect", "upgrade"})
EVENT_TYPE_HEADERS = frozenset({"x-github-event", "x-gitlab-event", "x-shopify-topic"})
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


def conflict_set(doc: Mapping[str, Any]) -> dict[str, Any]:
    """The spec's ``conflict.set``, else the one default derived from its event body and provider
    (`harness.wire.conflicts.default_conflict`): the same in a spec file and in ``acklab.attack()``."""
    given = doc.get("conflict", {}).get("set")
    if given:
        return dict(given)
    return default_conflict(doc["event"], doc["signing"]["scheme"])


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


def check_target_doc(doc: Mapping[str, Any], *, source: str) -> None:
    """Placeholders, the event id's place, the conflict paths and the headers (exit 3)."""
    scheme = doc["signing"]["scheme"]
    unknown = unknown_placeholders(doc["event"])
    if unknown:
        raise SpecError(
            f"{source}: {unknown[0]}: unknown placeholder; use one of {', '.join('{{' + k + '}}' for k in KNOWN)}"
        )
    if not _mentions_event_id(doc["event"]):
        raise SpecError(
            f'{source}: event: no {{{{event_id}}}} in the template; add e.g. id: "{{{{event_id}}}}"'
        )
    if scheme == "stripe" and doc["event"].get("id") != "{{event_id}}":
        raise SpecError(
            f"{source}: event.id: got {doc['event'].get('id')!r}; Stripe carries the event id in the body: "
            'set id: "{{event_id}}"'
        )
    changes = conflict_set(doc)
    try:
        conflicting(sample_event(doc["event"]), changes)
    except SpecError as exc:
        raise SpecError(f"{source}: {exc}") from None
    check_headers(doc.get("headers", {}), scheme=scheme, field_name=f"{source}: headers")
    http = doc["effects"].get("http", {})
    check_headers(http.get("headers", {}), scheme="none", field_name=f"{source}: effects.http.headers")
    check_expect(doc, source=source)
    check_objects(doc, source=source)  # lifecycle:, siblings:, competitor: (harness.targets.objects)


def check_expect(doc: Mapping[str, Any], *, source: str) -> None:
    """Refuse (exit 3) an ``expect:`` or ``command:`` that contradicts itself or cannot work."""
    expect = doc.get("expect", {})
    if expect.get("conflict") == "ignore" and "conflict_status" in expect:
        raise SpecError(
            f"{source}: expect: conflict: ignore says a conflicting body is answered 2xx (dedupe by id), but "
            f"conflict_status {expect['conflict_status']!r} lists the statuses that reject it; remove "
            "conflict_status, or set conflict: reject"
        )
    command = doc.get("command", {})
    cwd = command.get("cwd")
    if isinstance(cwd, str) and not ENV_REF.match(cwd) and not (Path(source).parent / cwd).is_dir():
        raise SpecError(
            f"{source}: command.cwd: got {cwd!r}, which is not a directory ({Path(source).parent / cwd}); "
            "a relative cwd is read from the spec file's folder"
        )
    statuses = command.get("ready", {}).get("status", [])
    if statuses and all(s in (502, 503, 504) for s in statuses):
        raise SpecError(
            f"{source}: command.ready.status: got {statuses!r}; 502, 503 and 504 are what a booting service "
            "or its proxy answers, not readiness; use the status the service answers once it is up (e.g. [200])"
        )


def shown(value: str, resolved: str) -> str:
    """How a URL is named in a message: its ``env:NAME`` when it came from the environment."""
    return value if ENV_REF.match(value) else resolved


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


def check_wire_fields(doc: Mapping[str, Any]) -> None:
    """The signing secret and every header the spec sends, resolved and held to the one-line,
    bounded rule (`check_wire_value`, exit 3); the URLs are `check_reach`'s. Values naming an unset
    variable are left out of `doc` by the caller."""
    secret = doc.get("signing", {}).get("secret")
    if isinstance(secret, str):
        check_wire_value(
            resolve_env(secret, field_name="signing.secret"), field_name="signing.secret", shown="the secret"
        )
    competitor = doc.get("competitor")
    for where, headers in (
        ("headers", doc.get("headers", {})),
        ("effects.http.headers", doc.get("effects", {}).get("http", {}).get("headers", {})),
        ("competitor.headers", competitor.get("headers", {}) if isinstance(competitor, Mapping) else {}),
    ):
        for name, value in headers.items():
            resolved = resolve_env(str(value), field_name=f"{where}.{name}")
            check_wire_value(str(name), field_name=f"{where}.{name}", shown="the header's name")
            check_wire_value(resolved, field_name=f"{where}.{name}", shown="the header's value")


def check_reach(doc: Mapping[str, Any], *, allow_remote: bool) -> None:
    """Every URL the lab will contact, resolved and held to the loopback rule (exit 5 off it).

    A URL missing from `doc` is skipped (`acklab validate --allow-unset` drops the unset ones).
    """
    if "endpoint" in doc:
        check_url(doc["endpoint"], field_name="endpoint", allow_remote=allow_remote)
    effects = doc.get("effects", {})
    if "url" in effects.get("http", {}):
        check_url(
            effects["http"]["url"],
            field_name="effects.http.url",
            allow_remote=allow_remote,
            needs_event_id=True,
        )
    if "url" in effects.get("sql", {}):
        check_database_url(effects["sql"]["url"], allow_remote=allow_remote)
    database = doc.get("database")
    if isinstance(database, Mapping) and isinstance(database.get("url"), str):
        url = check_database_url(database["url"], allow_remote=allow_remote, field_name="database.url")
        if not url.startswith(("postgresql", "postgres")):
            raise SpecError(
                f"database.url: got a {url.split(':', 1)[0]!r} URL; the lab creates a database per service on a "
                "PostgreSQL server only (postgresql://user@127.0.0.1:5432/postgres)"
            )
    ready = (doc.get("command") or {}).get("ready")
    if isinstance(ready, Mapping) and isinstance(ready.get("url"), str):
        check_url(ready["url"], field_name="command.ready.url", allow_remote=allow_remote)
    competitor = doc.get("competitor")
    competitor_url = competitor.get("url") if isinstance(competitor, Mapping) else None
    if isinstance(competitor_url, str) and not competitor_url.startswith("/"):  # a path: the endpoint's host
        check_url(competitor_url, field_name="competitor.url", allow_remote=allow_remote)


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
