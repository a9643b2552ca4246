"""An app target described as a target spec allows: a spec file, a dict, or keyword fields.

``acklab.attack(app, spec=..., endpoint=..., signing=..., effects=...)`` merges, in this
order: the defaults, the spec (a ``kind: target`` file or the same document as a dict),
then every keyword given. The merged document is checked like a spec file is (the target
schema, then the checks a schema cannot express: placeholders, conflict paths, headers,
``expect:`` contradictions), so a field means the same here as in ``acklab run``. What
differs for an app served in this process:

* ``endpoint`` may be a path (``/webhooks``): the app sees host ``testserver``, as with
  Starlette's and Django's test clients. A full URL sets the host the app sees; nothing is
  sent to it (so no loopback rule applies).
* ``effects`` may be a Python callable (``effects=lambda event_id: ...``, sync or async),
  with ``state=`` beside it; or ``effects.http.url`` a path of the app itself (a URL on
  the endpoint's own host and port means the same). Another service's URL keeps the
  loopback rule.
* ``command:`` is ignored: the lab serves the app object it was given.
* Defaults: ``signing: {scheme: none}`` (``standard`` when only a secret is given), the
  event template of the built-in fixture (an ``order.paid``), and its conflict.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import httpx

from acklab.evidence.redaction import remember
from acklab.harness.errors import SpecError
from acklab.harness.specs import placeholders
from acklab.harness.specs.credentials import resolve_env, url_secrets
from acklab.harness.specs.load import check, load_yaml
from acklab.harness.targets.app import SERVING, AppEffects, AppTarget, SocketAppTarget
from acklab.harness.targets.asgi import as_asgi
from acklab.harness.targets.base import Expect
from acklab.harness.targets.callables import Reader
from acklab.harness.targets.effects import database_kind
from acklab.harness.targets.spec import resolve_headers
from acklab.harness.targets.spec_checks import (
    DEFAULT_CONFLICT,
    check_database_url,
    check_target_doc,
    check_url,
    shown,
)
from acklab.harness.wire.providers import profile
from acklab.harness.wire.signing import SIGNERS

IN_PROCESS_BASE = "http://testserver"
DEFAULT_EVENT: dict[str, Any] = {
    "id": "{{event_id}}",
    "type": "order.paid",
    "timestamp": "{{timestamp}}",
    "data": {"order_id": "{{order_id}}", "amount_cents": 1200, "currency": "EUR"},
}
DEFAULT_EVENT_CONFLICT = {"data.amount_cents": 9900}
# What the schema sees in place of a callable (it is checked, the placeholder never used).
_CALLABLE_STANDIN = {"http": {"url": f"{IN_PROCESS_BASE}/acklab-callable/{{{{event_id}}}}", "json_path": "n"}}
# How the incident's target.endpoint says the app was served.
SERVED = {
    "auto": "in-process ASGI; uvicorn on 127.0.0.1 in this process where a socket is needed",
    "in-process": "in-process ASGI, no socket",
    "socket": "uvicorn on 127.0.0.1, in this process",
}
# The fields a caller may give as keywords, by their spec name.
FIELDS = ("name", "endpoint", "signing", "event", "conflict", "expect", "headers", "delivery")
NAME_CHARS = re.compile(r"[^A-Za-z0-9._-]+")


def target_name(text: str) -> str:
    """`text` made a valid target name (letters, digits, ``. _ -``; at most 80), e.g. from a test's id."""
    name = NAME_CHARS.sub("-", text).strip("-._")[:80].rstrip("-._")
    return name or "app"


def _spec_doc(spec: str | os.PathLike[str] | Mapping[str, Any] | None) -> tuple[dict[str, Any], str]:
    """The spec's document and how messages name it."""
    if spec is None:
        return {}, "attack()"
    if isinstance(spec, Mapping):
        return dict(spec), "spec"
    if isinstance(spec, str | os.PathLike):
        path = Path(spec)
        doc = load_yaml(path)
        if not isinstance(doc, dict):
            raise SpecError(f"{path}: got {type(doc).__name__}; a target spec is a YAML mapping")
        if doc.get("kind", "target") != "target":
            raise SpecError(f"{path}: kind: got {doc.get('kind')!r}; attack() takes a spec of kind 'target'")
        return doc, str(path)
    raise SpecError(
        f"spec: got {type(spec).__name__}; expected the path of a target spec file or the spec as a dict"
    )


def _merge(base: Mapping[str, Any], fields: Mapping[str, Any], secret: str | None) -> dict[str, Any]:
    doc: dict[str, Any] = {"apiVersion": "acklab/v1", "kind": "target", **base}
    doc.pop("command", None)  # the lab serves the app object itself
    for key in FIELDS:
        value = fields.get(key)
        if value is None:
            continue
        if key == "signing" and isinstance(value, str):
            value = {"scheme": value}
        if key == "conflict" and isinstance(value, Mapping) and set(value) != {"set"}:
            value = {"set": dict(value)}
        doc[key] = value
    signing = dict(doc.get("signing") or {})
    if secret is not None:
        signing = {"scheme": signing.get("scheme", "standard"), **signing, "secret": secret}
    doc["signing"] = signing or {"scheme": "none"}
    if "event" not in doc:
        doc["event"] = DEFAULT_EVENT
        doc.setdefault("conflict", {"set": DEFAULT_EVENT_CONFLICT})
    return doc


def _endpoint(value: Any, source: str) -> tuple[str, str]:
    """The endpoint as (base URL the app sees, path and query on the app)."""
    if not isinstance(value, str) or not value:
        raise SpecError(
            f"{source}: endpoint: got {value!r}; pass the path the app serves webhooks at, "
            "e.g. endpoint='/webhooks/orders' (or a spec with endpoint:)"
        )
    url = value if value.startswith("/") else resolve_env(value, field_name="endpoint")
    if url.startswith("/"):
        return IN_PROCESS_BASE, url
    parsed = httpx.URL(url)
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise SpecError(
            f"{source}: endpoint: got {shown(value, '<the URL>')!r}; expected a path such as '/webhooks' "
            "or an http(s) URL"
        )
    path = parsed.raw_path.decode("ascii") or "/"
    return f"{parsed.scheme}://{parsed.netloc.decode('ascii')}", path


def _effects(doc: Mapping[str, Any], base: str, *, allow_remote: bool, source: str) -> tuple[AppEffects, str]:
    """``effects:`` of the merged document as an `AppEffects`, and what the incident calls the database."""
    if "sql" in doc:
        sql = doc["sql"]
        url = check_database_url(sql["url"], allow_remote=allow_remote)
        remember(*url_secrets(url))
        queries = {"url": url, "count": sql["count"], **({"state": sql["state"]} if "state" in sql else {})}
        return AppEffects(sql=queries), database_kind(url)
    http = doc["http"]
    headers = resolve_headers(http.get("headers", {}), field_name="effects.http.headers")
    common: dict[str, Any] = {"json_path": http["json_path"], "state_path": http.get("state_path")}
    raw = http["url"]
    if raw.startswith("/"):
        return AppEffects(path=raw, headers=headers, **common), "http"
    url = resolve_env(raw, field_name="effects.http.url")
    if url.startswith(base + "/"):  # the endpoint's own scheme, host and port: the app itself
        return AppEffects(path=url[len(base) :], headers=headers, **common), "http"
    url = check_url(
        raw, field_name=f"{source}: effects.http.url", allow_remote=allow_remote, needs_event_id=True
    )
    return AppEffects(url=url, headers=headers, shown=shown(raw, url), **common), "http"


def app_target(
    app: Any,
    *,
    spec: str | os.PathLike[str] | Mapping[str, Any] | None = None,
    fields: Mapping[str, Any] | None = None,
    secret: str | None = None,
    effects: Reader | Mapping[str, Any] | None = None,
    state: Reader | None = None,
    default_name: str = "app",
    interface: str = "auto",
    serving: str = "auto",
    lifespan: bool = True,
    allow_remote: bool = False,
    where: Path | None = None,
    values: Mapping[str, str] | None = None,
) -> AppTarget:
    """The target for `app`, described by `spec` and `fields` (see the module docstring); SpecError (exit 3)
    naming the field, the value and the fix when the description is not valid.

    `values`: the run placeholders (``{{port}}``, ``{{scratch}}``...) of the spec, filled in
    before anything is checked (`webhook_lab.placeholders` allocates them for a test)."""
    if serving not in SERVING:
        raise SpecError(f"serving: got {serving!r}; expected one of {', '.join(SERVING)}")
    base_doc, source = _spec_doc(spec)
    doc = _merge(base_doc, fields or {}, secret)
    placeholders.check(doc, source=source, in_process=True)
    missing = sorted(placeholders.used(doc) - set(values or {}))
    if missing:
        raise SpecError(
            f"{source}: uses {', '.join('{{' + m + '}}' for m in missing)}, which the caller did not allocate; "
            "in a test, take them from webhook_lab.placeholders (it allocates them), or pass placeholders="
        )
    doc = placeholders.fill(doc, values or {})
    doc.setdefault("name", target_name(default_name))
    base, path = _endpoint(doc.get("endpoint"), source)
    counted = callable(effects)
    if effects is not None and not counted:
        if not isinstance(effects, Mapping):
            raise SpecError(
                f"effects: got {type(effects).__name__}; expected a callable (event id -> count) or a spec's "
                "effects mapping, e.g. {'sql': {'url': ..., 'count': ...}}"
            )
        doc["effects"] = dict(effects)
    if state is not None and not counted:
        raise SpecError(
            "state: a state callable needs effects= to be a callable too (both read your database)"
        )
    if "effects" not in doc and not counted:
        raise SpecError(
            f"{source}: effects: missing; pass effects=lambda event_id: <count of its side effects> "
            "(your ORM session), or a spec's effects (sql: or http:)"
        )
    checked = {**doc, "endpoint": base + path}
    if counted:
        checked["effects"] = _CALLABLE_STANDIN
    elif "http" in doc["effects"] and str(doc["effects"]["http"].get("url", "")).startswith("/"):
        checked["effects"] = {"http": {**doc["effects"]["http"], "url": base + doc["effects"]["http"]["url"]}}
    check("target", checked, source=source)
    check_target_doc(checked, source=source)

    scheme = doc["signing"]["scheme"]
    signing_secret = resolve_env(doc["signing"].get("secret", ""), field_name="signing.secret")
    remember(signing_secret)
    SIGNERS[scheme].check_secret(signing_secret)
    if callable(effects):
        described = (AppEffects(count=effects, read_state=state), "callable")
    else:
        described = _effects(doc["effects"], base, allow_remote=allow_remote, source=source)
    asgi, close = as_asgi(app, interface)
    expect = doc.get("expect", {})
    delivery = doc.get("delivery", {})
    target_class: Callable[..., AppTarget] = SocketAppTarget if serving == "socket" else AppTarget
    return target_class(
        name=doc["name"],
        kind="app",
        handler=doc["name"],
        endpoint=f"app {path} ({SERVED[serving]})",
        database=described[1],
        scheme=scheme,
        secret=signing_secret,
        timeout_s=float(delivery.get("timeout_s", profile(scheme).timeout_s)),
        template=doc["event"],
        conflict_set=doc.get("conflict", {}).get("set", DEFAULT_CONFLICT),
        expect=Expect.from_dict(expect),
        headers=resolve_headers(doc.get("headers", {}), field_name="headers"),
        event_type=delivery.get("event_type"),
        app=asgi,
        base_url=base,
        path=path,
        effects=described[0],
        lifespan=lifespan,
        serving=serving,
        close=close,
        where=where,
    )
