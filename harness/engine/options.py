"""The keywords of the Python API, typed once and shared: ``acklab.run`` and ``acklab.attack`` take
them, the pytest plugin's ``webhook_lab`` passes them on, and mypy checks every call.

* `RunKeywords`: what ``acklab.run(target, ...)`` takes beside its target (`RunOptions`' fields).
* `TargetFields`: an app's description as a target spec allows (`harness.specs.app`): the spec,
  then any of its sections as keywords, and how its effects are counted.
* `ServedApp`: `TargetFields` and how the app is served in this process.
* `AttackOptions`: `ServedApp` and how the attack runs (``acklab.attack``, ``webhook_lab.attack``).
* `ExploreOptions`: `ServedApp` and how the explorer serves the app (``webhook_lab.explore``).
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

from acklab.harness.specs.target import FIELDS
from acklab.harness.targets.app import AppTarget
from acklab.harness.targets.app_spec import app_target

if TYPE_CHECKING:
    from acklab.harness.core.plan import RunSettings
    from acklab.harness.core.run_events import Consumer
    from acklab.harness.procs.confinement import Confinement
    from acklab.harness.sinks import Sinks
    from acklab.harness.specs.target import TargetSpec
    from acklab.harness.targets.callables import Reader

Experiments = str | Sequence[str]
PathLike = str | os.PathLike[str]


class RunKeywords(TypedDict, total=False):
    """``acklab.run(target, **keywords)``: the fields of `RunOptions` (docs/api.md)."""

    experiments: Experiments
    trials: int
    seed: int | None
    db: str | None
    out: PathLike
    resume: str | None
    allow_remote: bool
    shard: str | None
    settings: RunSettings
    deadline_s: float | None
    journal: bool
    checkout: Path | None
    confinement: Confinement | None
    unsandboxed: bool
    schema_from: Path | None
    secrets: tuple[str, ...]
    skip_inapplicable: bool
    allow_foreign_service: bool


class TargetFields(TypedDict, total=False):
    """An app described as a target spec allows: `spec` (a file, a dict or a `TargetSpec`), then its
    sections as keywords over it, and how one event's effects (and state) are read."""

    spec: PathLike | Mapping[str, Any] | TargetSpec | None
    name: str | None
    endpoint: str | None
    signing: str | Mapping[str, Any] | None
    secret: str | None
    event: Mapping[str, Any] | None
    conflict: Mapping[str, Any] | None
    expect: Mapping[str, Any] | None
    headers: Mapping[str, str] | None
    delivery: Mapping[str, Any] | None
    lifecycle: Mapping[str, Any] | None
    siblings: Sequence[Mapping[str, Any]] | None
    competitor: Mapping[str, Any] | None
    effects: Reader | Mapping[str, Any] | None
    state: Reader | None


class ServedApp(TargetFields, total=False):
    """`TargetFields` and how the app is served in this process (the attack's and the explorer's)."""

    interface: str
    lifespan: bool
    where: PathLike | None
    placeholders: Mapping[str, str] | None


class AttackOptions(ServedApp, total=False):
    """``acklab.attack(app, **options)`` and ``webhook_lab.attack(app, **options)``."""

    experiments: Experiments
    trials: int
    seed: int | None
    out: PathLike
    settings: RunSettings | None
    serving: str
    allow_remote: bool
    deadline_s: float | None
    journal: bool
    consumers: Sequence[Consumer]
    sinks: Sinks | None


class ExploreOptions(ServedApp, total=False):
    """``webhook_lab.explore(app, budget=..., **options)``: the app and how the explorer serves it."""

    seed: int | None
    out: PathLike


def app_target_of(
    app: Any, options: ServedApp, *, serving: str, allow_remote: bool, default_name: str
) -> AppTarget:
    """The target for `app` as `options` describe it (`harness.targets.app_spec.app_target`): the
    spec sections among them laid over `spec`, served as `serving` says."""
    fields = {key: value for key, value in options.items() if key in FIELDS}
    if (siblings := options.get("siblings")) is not None:
        fields["siblings"] = list(siblings)
    where = options.get("where")
    return app_target(
        app,
        spec=options.get("spec"),
        fields=fields,
        secret=options.get("secret"),
        effects=options.get("effects"),
        state=options.get("state"),
        default_name=default_name,
        interface=options.get("interface", "auto"),
        serving=serving,
        lifespan=options.get("lifespan", True),
        allow_remote=allow_remote,
        where=Path(where) if where is not None else Path.cwd(),
        values=options.get("placeholders"),
    )


def check_keywords(given: Mapping[str, Any], allowed: type, caller: str) -> None:
    """TypeError naming a keyword `caller` does not take (`allowed`, a TypedDict), with the nearest
    one and the whole list: mypy catches it in a checked caller, this in any other."""
    keys = list(allowed.__annotations__)  # a TypedDict's keys, its bases' first, in order
    unknown = [key for key in given if key not in keys]
    if unknown:
        close = difflib.get_close_matches(unknown[0], keys, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise TypeError(
            f"{caller}: unexpected keyword {unknown[0]!r}{hint}; the options are: {', '.join(keys)}"
        )
