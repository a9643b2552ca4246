"""acklab: a reliability lab for webhook consumers.

Python API (every name in ``__all__``; each is imported on first use, so ``import acklab``
and the ``acklab`` command stay cheap)::

    import acklab

    result = acklab.run("fixture:unsafe", experiments=["lost-ack"], trials=3)
    result = acklab.attack(app, endpoint="/webhooks", secret=SECRET,
                           effects=lambda event_id: count_fulfillments(event_id))
    assert result.passed, result.explain()
    acklab.verify_bundle(result.bundle).ok

The pytest plugin (`acklab.pytest_plugin`, loaded by pytest when acklab is installed)
gives the ``webhook_lab`` fixture around `attack`.

One import name (DESIGN.md): the fixture, harness, evidence, console and flows live in the
repository's top-level folders and install beneath this package as ``acklab.app``,
``acklab.harness``, ``acklab.evidence``, ``acklab.console`` and ``acklab.flows``.
"""

from __future__ import annotations

import importlib
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from acklab.evidence.bundle import Verification as BundleVerification
    from acklab.evidence.bundle import verify as verify_bundle
    from acklab.evidence.exitcodes import AcklabError, ExitCode
    from acklab.harness.api import attack, run
    from acklab.harness.plan import Settings as RunSettings
    from acklab.harness.results import ExperimentResult, RunResult, Violation
    from acklab.harness.runner import RunOptions

    DEFAULT_EXPERIMENTS: tuple[str, ...]

__all__ = [
    "DEFAULT_EXPERIMENTS",
    "AcklabError",
    "BundleVerification",
    "ExitCode",
    "ExperimentResult",
    "RunOptions",
    "RunResult",
    "RunSettings",
    "Violation",
    "__version__",
    "attack",
    "run",
    "verify_bundle",
]

# Public name -> (module, attribute): imported on first use (module __getattr__, PEP 562).
_LAZY: dict[str, tuple[str, str]] = {
    "AcklabError": ("acklab.evidence.exitcodes", "AcklabError"),
    "BundleVerification": ("acklab.evidence.bundle", "Verification"),
    "ExitCode": ("acklab.evidence.exitcodes", "ExitCode"),
    "ExperimentResult": ("acklab.harness.results", "ExperimentResult"),
    "RunOptions": ("acklab.harness.runner", "RunOptions"),
    "RunResult": ("acklab.harness.results", "RunResult"),
    "RunSettings": ("acklab.harness.plan", "Settings"),
    "Violation": ("acklab.harness.results", "Violation"),
    "attack": ("acklab.harness.api", "attack"),
    "run": ("acklab.harness.api", "run"),
    "verify_bundle": ("acklab.evidence.bundle", "verify"),
}


def _checkout_root() -> Path | None:
    """The repository this package is imported from, when it is a source checkout.

    An installed wheel holds the packages inside ``acklab/``. A checkout (the project itself,
    or a worktree the repair flow made) keeps them beside it; adding the checkout's root to
    ``__path__`` makes ``acklab.app`` the ``app/`` of *this* checkout, so a process rooted in
    a worktree imports that worktree's code and nothing of another checkout's.
    """
    root = Path(__file__).resolve().parent.parent
    markers = (root / "pyproject.toml", root / "harness" / "__init__.py", root / "app" / "webhooks.py")
    return root if all(m.is_file() for m in markers) else None


_root = _checkout_root()
if _root is not None and str(_root) not in __path__:
    __path__.append(str(_root))

try:
    __version__ = version("acklab")
except PackageNotFoundError:  # pragma: no cover - running from a bare checkout
    __version__ = "0+unknown"


def _default_experiments() -> tuple[str, ...]:
    from acklab.harness.experiments import EXPERIMENTS

    return tuple(name for name, experiment in EXPERIMENTS.items() if experiment.default)


def __getattr__(name: str) -> Any:
    if name == "DEFAULT_EXPERIMENTS":  # the experiments a run without names runs, in their order
        value: Any = _default_experiments()
    elif name in _LAZY:
        module, attribute = _LAZY[name]
        value = getattr(importlib.import_module(module), attribute)
    else:
        raise AttributeError(f"module 'acklab' has no attribute {name!r}")
    globals()[name] = value  # later look-ups are plain attribute reads
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
