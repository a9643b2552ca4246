"""acklab: a reliability lab for webhook consumers.

Python API — every name in ``__all__``, each imported on first use, so ``import acklab``
and the ``acklab`` command stay cheap::

    import acklab

    result = acklab.run("fixture:unsafe", experiments=["lost-ack"], trials=3)
    result = acklab.attack(app, endpoint="/webhooks", secret=SECRET,
                           effects=lambda event_id: count_fulfillments(event_id))
    assert result.passed, result.explain()
    acklab.verify_bundle(result.bundle).ok

* ``run(target, **options)``: attack a built-in fixture or a target spec file (``acklab run``);
  its keywords are ``RunKeywords`` (the fields of ``RunOptions``), checked by mypy.
* ``attack(app, **options)``: attack an ASGI or WSGI app object inside this process; its
  keywords are ``AttackOptions`` (the app as a spec describes it, and how the attack runs).
* ``RunOptions``, ``RunSettings``: what a run takes (``RunSettings``: burst, settle window...).
* ``TargetSpec``: a target spec file read and checked (``TargetSpec.merged(...)`` lays
  sections over it); ``attack(app, spec=...)`` takes one.
* ``Sinks``: the lab's SMTP and outbound API sinks an app sends to, counted beside its rows.
* ``WebhookLab``: the pytest fixture ``webhook_lab`` (``attack``, ``run``, ``explore``);
  ``ExploreOptions`` are its explorer's keywords, ``ExploreResult`` what the explorer found.
* ``RunResult`` (``passed``, ``verdict``, ``exit_code``, ``experiments``, ``violations``,
  ``bundle``, ``explain()``), ``ExperimentResult``, ``Violation``: what a run returns.
* ``verify_bundle(path)`` -> ``BundleVerification`` (``ok``, ``describe()``): check a bundle
  against its manifest (``acklab evidence verify``).
* ``DEFAULT_EXPERIMENTS``: the names of the experiments a run without names runs, in order.
* ``AcklabError`` (bad input, a lab failure; ``exit_code``), ``ExitCode``: the exit codes.
* ``__version__``.

The pytest plugin (`acklab.pytest_plugin`, loaded by pytest when acklab is installed)
gives the ``webhook_lab`` fixture around `attack`.

One import name (ARCHITECTURE.md, "Layers"): the fixture, harness, evidence, console and flows live in the
repository's top-level folders and install beneath this package as ``acklab.app``,
``acklab.harness``, ``acklab.evidence``, ``acklab.console`` and ``acklab.flows``.
"""

# Only public names and underscored helpers live in this namespace: tests/test_exported_members.py
# checks that every public name is in __all__.
import importlib as _importlib
import typing as _typing
from importlib.metadata import PackageNotFoundError as _PackageNotFoundError
from importlib.metadata import version as _version
from pathlib import Path as _Path

if _typing.TYPE_CHECKING:
    from acklab.evidence.bundle import Verification as BundleVerification
    from acklab.evidence.bundle import verify as verify_bundle
    from acklab.evidence.exitcodes import AcklabError, ExitCode
    from acklab.harness.core.plan import RunSettings
    from acklab.harness.engine.api import attack, run
    from acklab.harness.engine.options import AttackOptions, ExploreOptions, RunKeywords
    from acklab.harness.engine.results import ExperimentResult, RunResult, Violation
    from acklab.harness.engine.runner import RunOptions
    from acklab.harness.explore.api import ExploreResult
    from acklab.harness.sinks import Sinks
    from acklab.harness.specs.target import TargetSpec
    from acklab.pytest_plugin import WebhookLab

    DEFAULT_EXPERIMENTS: tuple[str, ...]

__all__ = [
    "DEFAULT_EXPERIMENTS",
    "AcklabError",
    "AttackOptions",
    "BundleVerification",
    "ExitCode",
    "ExperimentResult",
    "ExploreOptions",
    "ExploreResult",
    "RunKeywords",
    "RunOptions",
    "RunResult",
    "RunSettings",
    "Sinks",
    "TargetSpec",
    "Violation",
    "WebhookLab",
    "__version__",
    "attack",
    "run",
    "verify_bundle",
]

# Public name -> (module, attribute): imported on first use (module __getattr__, PEP 562).
_LAZY: dict[str, tuple[str, str]] = {
    "AcklabError": ("acklab.evidence.exitcodes", "AcklabError"),
    "AttackOptions": ("acklab.harness.engine.options", "AttackOptions"),
    "BundleVerification": ("acklab.evidence.bundle", "Verification"),
    "ExitCode": ("acklab.evidence.exitcodes", "ExitCode"),
    "ExperimentResult": ("acklab.harness.engine.results", "ExperimentResult"),
    "ExploreOptions": ("acklab.harness.engine.options", "ExploreOptions"),
    "ExploreResult": ("acklab.harness.explore.api", "ExploreResult"),
    "RunKeywords": ("acklab.harness.engine.options", "RunKeywords"),
    "RunOptions": ("acklab.harness.engine.runner", "RunOptions"),
    "RunResult": ("acklab.harness.engine.results", "RunResult"),
    "RunSettings": ("acklab.harness.core.plan", "RunSettings"),
    "Sinks": ("acklab.harness.sinks", "Sinks"),
    "TargetSpec": ("acklab.harness.specs.target", "TargetSpec"),
    "Violation": ("acklab.harness.engine.results", "Violation"),
    "WebhookLab": ("acklab.pytest_plugin", "WebhookLab"),
    "attack": ("acklab.harness.engine.api", "attack"),
    "run": ("acklab.harness.engine.api", "run"),
    "verify_bundle": ("acklab.evidence.bundle", "verify"),
}


def _checkout_root() -> _Path | None:
    """The repository this package is imported from, when it is a source checkout.

    An installed wheel holds the packages inside ``acklab/``. A checkout (the project itself,
    or a worktree the repair flow made) keeps them beside it; adding the checkout's root to
    ``__path__`` makes ``acklab.app`` the ``app/`` of *this* checkout, so a process rooted in
    a worktree imports that worktree's code and nothing of another checkout's.
    """
    root = _Path(__file__).resolve().parent.parent
    markers = (root / "pyproject.toml", root / "harness" / "__init__.py", root / "app" / "webhooks.py")
    return root if all(m.is_file() for m in markers) else None


_root = _checkout_root()
if _root is not None and str(_root) not in __path__:
    __path__.append(str(_root))

try:
    __version__ = _version("acklab")
except _PackageNotFoundError:  # pragma: no cover - running from a bare checkout
    __version__ = "0+unknown"


def _default_experiments() -> tuple[str, ...]:
    from acklab.harness.experiments import EXPERIMENTS

    return tuple(name for name, experiment in EXPERIMENTS.items() if experiment.default)


def __getattr__(name: str) -> _typing.Any:
    if name == "DEFAULT_EXPERIMENTS":
        value: _typing.Any = _default_experiments()
    elif name in _LAZY:
        module, attribute = _LAZY[name]
        value = getattr(_importlib.import_module(module), attribute)
    else:
        raise AttributeError(f"module 'acklab' has no attribute {name!r}")
    globals()[name] = value  # later look-ups are plain attribute reads
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
