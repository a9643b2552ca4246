"""acklab: a reliability lab for webhook consumers.

One import name (ARCHITECTURE.md, "Layers"): the fixture, harness, evidence, console and flows live in the
repository's top-level folders and install beneath this package as ``acklab.app``,
``acklab.harness``, ``acklab.evidence``, ``acklab.console`` and ``acklab.flows``.
"""

from importlib.metadata import PackageNotFoundError, version
from pathlib import Path


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
