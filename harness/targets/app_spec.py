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
* ``competitor.url`` may be a path of the app itself (``/checkout/{{order_id}}/complete``):
  race-with-request sends it to the app as served, beside the webhook.
* Defaults: ``signing: {scheme: none}`` (``standard`` when only a secret is given), the
  event template of the built-in fixture (an ``order.paid``), and the conflict every target
  without ``conflict:`` gets (`harness.wire.conflicts.default_conflict`: here its
  ``data.amount_cents`` changes, 1200 to 9900).
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from acklab.evidence.redaction import remember
from acklab.harness.errors import SpecError
from acklab.harness.specs.app import IN_PROCESS_BASE, app_spec
from acklab.harness.specs.credentials import resolve_env, shown, url_secrets
from acklab.harness.specs.target import FIELDS, Effects, SqlEffects, TargetSpec
from acklab.harness.targets.app import SERVING, AppEffects, AppTarget, SocketAppTarget
from acklab.harness.targets.asgi import as_asgi
from acklab.harness.targets.callables import Reader
from acklab.harness.targets.effects import database_kind
from acklab.harness.targets.objects import ObjectEvents
from acklab.harness.targets.served_parts import resolve_headers
from acklab.harness.targets.spec_checks import check_database_url, check_target_doc, check_url, conflict_set
from acklab.harness.wire.providers import profile
from acklab.harness.wire.signing import SIGNERS

__all__ = ["FIELDS", "IN_PROCESS_BASE", "SERVED", "app_target", "target_name"]

# How the incident's target.endpoint says the app was served.
SERVED = {
    "auto": "in-process ASGI; uvicorn on 127.0.0.1 in this process where a socket is needed",
    "in-process": "in-process ASGI, no socket",
    "socket": "uvicorn on 127.0.0.1, in this process",
}
NAME_CHARS = re.compile(r"[^A-Za-z0-9._-]+")


def target_name(text: str) -> str:
    """`text` made a valid target name (letters, digits, ``. _ -``; at most 80), e.g. from a test's id."""
    name = NAME_CHARS.sub("-", text).strip("-._")[:80].rstrip("-._")
    return name or "app"


def _effects(effects: Effects, base: str, *, allow_remote: bool, source: str) -> tuple[AppEffects, str]:
    """``effects:`` of the spec as an `AppEffects`, and what the incident calls the database."""
    http = effects.rows
    if isinstance(http, SqlEffects):
        url = check_database_url(http.url, allow_remote=allow_remote)
        remember(*url_secrets(url))
        return AppEffects(sql=http.model_copy(update={"url": url})), database_kind(url)
    headers = resolve_headers(http.headers, field_name="effects.http.headers")
    common: dict[str, Any] = {"json_path": http.json_path, "state_path": http.state_path}
    url = resolve_env(http.url, field_name="effects.http.url")
    if url.startswith(base + "/"):  # the endpoint's own scheme, host and port: the app itself
        return AppEffects(path=url[len(base) :], headers=headers, **common), "http"
    url = check_url(
        http.url, field_name=f"{source}: effects.http.url", allow_remote=allow_remote, needs_event_id=True
    )
    return AppEffects(url=url, headers=headers, shown=shown(http.url, url), **common), "http"


def _objects(spec: TargetSpec, base: str, *, allow_remote: bool, source: str) -> ObjectEvents:
    competitor = spec.competitor
    objects = ObjectEvents.from_spec(
        spec,
        competitor_headers=resolve_headers(
            competitor.headers if competitor is not None else {}, field_name="competitor.headers"
        ),
    )
    if objects.competitor is not None and not objects.competitor.url.startswith("/"):
        url = check_url(
            objects.competitor.url, field_name=f"{source}: competitor.url", allow_remote=allow_remote
        )
        if url.startswith(base + "/"):  # the endpoint's own host: a path of the app itself
            url = url[len(base) :]
        objects = dataclasses.replace(objects, competitor=dataclasses.replace(objects.competitor, url=url))
    return objects


def app_target(
    app: Any,
    *,
    spec: str | os.PathLike[str] | Mapping[str, Any] | TargetSpec | None = None,
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
    """The target for `app`, described by `spec` and `fields` (`harness.specs.app`); SpecError (exit 3)
    naming the field, the value and the fix when the description is not valid.

    `values`: the run placeholders (``{{port}}``, ``{{scratch}}``...) of the spec, filled in
    before anything is checked (`webhook_lab.placeholders` allocates them for a test)."""
    if serving not in SERVING:
        raise SpecError(f"serving: got {serving!r}; expected one of {', '.join(SERVING)}")
    counted = callable(effects)
    if effects is not None and not counted and not isinstance(effects, Mapping):
        raise SpecError(
            f"effects: got {type(effects).__name__}; expected a callable (event id -> count) or a spec's "
            "effects mapping, e.g. {'sql': {'url': ..., 'count': ...}}"
        )
    if state is not None and not counted:
        raise SpecError(
            "state: a state callable needs effects= to be a callable too (both read your database)"
        )
    described = app_spec(
        spec,
        fields or {},
        secret=secret,
        effects=effects if isinstance(effects, Mapping) else None,
        counted=counted,
        default_name=target_name(default_name),
        values=values,
    )
    checked, source, base, path = described.spec, described.source, described.base, described.path
    check_target_doc(checked, source=source)

    scheme = checked.signing.scheme
    signing_secret = resolve_env(checked.signing.secret or "", field_name="signing.secret")
    remember(signing_secret)
    SIGNERS[scheme].check_secret(signing_secret)
    if callable(effects):
        how = (AppEffects(count=effects, read_state=state), "callable")
    else:
        how = _effects(checked.effects, base, allow_remote=allow_remote, source=source)
    objects = _objects(checked, base, allow_remote=allow_remote, source=source)
    asgi, close = as_asgi(app, interface)
    timeout_s = checked.delivery.timeout_s
    target_class: Callable[..., AppTarget] = SocketAppTarget if serving == "socket" else AppTarget
    return target_class(
        name=checked.name,
        kind="app",
        handler=checked.name,
        endpoint=f"app {path} ({SERVED[serving]})",
        database=how[1],
        scheme=scheme,
        secret=signing_secret,
        timeout_s=profile(scheme).timeout_s if timeout_s is None else timeout_s,
        template=checked.event,
        conflict_set=conflict_set(checked),
        expect=checked.expect,
        headers=resolve_headers(checked.headers, field_name="headers"),
        event_type=checked.delivery.event_type,
        objects=objects,
        app=asgi,
        base_url=base,
        path=path,
        effects=how[0],
        lifespan=lifespan,
        serving=serving,
        close=close,
        where=where,
    )
