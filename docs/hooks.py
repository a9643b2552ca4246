"""MkDocs hooks of acklab's docs site: where the API reference finds acklab's code.

mkdocstrings (griffe) reads modules from the file system, as a package laid out on disk. acklab
installs one import name over six folders (``acklab/``, ``app/``, ``harness/``... mapped by
setuptools' ``package-dir``), a layout griffe cannot follow. So before the build this links
the installed shape into a temporary directory (``acklab/`` with each package beneath it,
wherever the import system finds them: a checkout or a wheel) and hands it to the Python
handler as its search path; the API pages then document what is installed, from its docstrings.
"""

from __future__ import annotations

import importlib
import shutil
import tempfile
from pathlib import Path
from typing import Any

from mkdocs.plugins import event_priority

PACKAGES = ("app", "harness", "evidence", "console", "flows")
_trees: list[Path] = []


def installed_tree() -> Path:
    """A directory holding ``acklab/`` as it installs, made of links to the real folders."""
    import acklab

    tree = Path(tempfile.mkdtemp(prefix="acklab-api-"))
    package = tree / "acklab"
    package.mkdir()
    own = Path(acklab.__file__).resolve().parent
    # acklab's own modules are copied (griffe follows a linked __init__.py back to the checkout,
    # where the packages are not beneath it); the packages are linked.
    for path in own.glob("*.py"):
        shutil.copy2(path, package / path.name)
    for name in PACKAGES:
        module = importlib.import_module(f"acklab.{name}")
        (package / name).symlink_to(Path(str(module.__file__)).resolve().parent)
    _trees.append(tree)
    return tree


@event_priority(100)  # before mkdocstrings reads its handlers' configuration
def on_config(config: Any) -> Any:
    python = config.plugins["mkdocstrings"].config.handlers.setdefault("python", {})
    python["paths"] = [str(installed_tree())]
    return config


def on_shutdown() -> None:
    for tree in _trees:
        shutil.rmtree(tree, ignore_errors=True)
