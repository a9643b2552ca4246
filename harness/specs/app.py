"""The target spec of an app object served in the lab's process (``acklab.attack``, ``webhook_lab``).

The spec is assembled from, in this order: the defaults, a spec (a ``kind: target`` file, or
the same document as a dict), then every keyword field given (`harness.specs.target.merge`).
The result is read like a spec file (`read_target`: the schema's messages, then the model),
so a field means the same here as in ``acklab run``. What differs for an app in this process:

* ``endpoint`` may be a path (``/webhooks``): the app sees host ``testserver``, as with
  Starlette's and Django's test clients. A full URL sets the host the app sees.
* ``effects.http.url`` may be a path of the app itself; the spec holds it as a URL on the
  endpoint's scheme, host and port (that is how the target knows it is the app's own).
  ``effects`` given as a callable is described by a stand-in the target never reads.
* ``command:`` is dropped: the lab serves the app object it was given.
* Defaults: ``signing: {scheme: none}`` (``standard`` when only a secret is given) and the
  event template of the built-in fixture (an ``order.paid``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from acklab.harness.errors import SpecError
from acklab.harness.specs import placeholders
from acklab.harness.specs.credentials import resolve_env, shown
from acklab.harness.specs.load import load_yaml
from acklab.harness.specs.target import RUN_PLACEHOLDERS, TargetSpec, merge, read_target, run_placeholders_of

IN_PROCESS_BASE = "http://testserver"
DEFAULT_EVENT: dict[str, Any] = {
    "id": "{{event_id}}",
    "type": "order.paid",
    "timestamp": "{{timestamp}}",
    "data": {"order_id": "{{order_id}}", "amount_cents": 1200, "currency": "EUR"},
}
# What the schema sees in place of a callable (it is checked, the placeholder never used).
CALLABLE_STAND_IN = {"http": {"url": f"{IN_PROCESS_BASE}/acklab-callable/{{{{event_id}}}}", "json_path": "n"}}


@dataclass(frozen=True)
class AppSpec:
    """The checked spec of an app in this process, and where on the app its endpoint is."""

    spec: TargetSpec  # endpoint and an effects path made URLs on `base`
    source: str  # how messages name the spec
    base: str  # the scheme and host the app sees
    path: str  # the endpoint's path (and query) on the app


SpecSource = str | os.PathLike[str] | Mapping[str, Any] | TargetSpec | None


def spec_document(spec: SpecSource) -> tuple[dict[str, Any], str]:
    """The document of `spec` (a file, a dict or a `TargetSpec`; may be partial) and how messages name it."""
    if spec is None:
        return {}, "attack()"
    if isinstance(spec, TargetSpec):
        return spec.dump(), spec.name
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


def app_spec(
    spec: SpecSource,
    overrides: Mapping[str, Any],
    *,
    secret: str | None = None,
    effects: Mapping[str, Any] | None = None,
    counted: bool = False,
    default_name: str = "app",
    values: Mapping[str, str] | None = None,
) -> AppSpec:
    """The checked spec of an app in this process (see the module docstring); SpecError (exit 3)
    naming the field, the value and the fix when the description is not valid.

    `effects`: a spec's ``effects:`` given beside the spec (None: the spec's own); `counted`: the
    effects are the caller's callable. `values`: the run placeholders, filled before any check."""
    base_doc, source = spec_document(spec)
    doc = merge(base_doc, overrides, secret=secret)
    doc.setdefault("event", DEFAULT_EVENT)
    placeholders.check(doc, RUN_PLACEHOLDERS, source=source, in_process=True)
    missing = sorted(run_placeholders_of(doc) - set(values or {}))
    if missing:
        raise SpecError(
            f"{source}: uses {', '.join('{{' + m + '}}' for m in missing)}, which the caller did not allocate; "
            "in a test, take them from webhook_lab.placeholders (it allocates them), or pass placeholders="
        )
    doc = placeholders.fill(doc, values or {})
    doc.setdefault("name", default_name)
    base, path = _endpoint(doc.get("endpoint"), source)
    if effects is not None and not counted:
        doc["effects"] = dict(effects)
    if "effects" not in doc and not counted:
        raise SpecError(
            f"{source}: effects: missing; pass effects=lambda event_id: <count of its side effects> "
            "(your ORM session), or a spec's effects (sql: or http:)"
        )
    doc["endpoint"] = base + path
    if counted:
        doc["effects"] = CALLABLE_STAND_IN
    else:
        http = doc["effects"].get("http") if isinstance(doc["effects"], Mapping) else None
        if isinstance(http, Mapping) and str(http.get("url", "")).startswith("/"):
            doc["effects"] = {**doc["effects"], "http": {**http, "url": base + http["url"]}}
    return AppSpec(read_target(doc, source=source), source, base, path)
