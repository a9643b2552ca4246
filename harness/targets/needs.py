"""What a target spec needs installed on this machine, said before a run meets it (``acklab validate``).

* **acklab's extras**: ``postgres`` for effects or ``database:`` on a ``postgresql://`` URL,
  ``sinks`` for ``effects.smtp`` / ``effects.outbound`` — each with the pip command that installs
  it the way this acklab was installed (`acklab.evidence.extras.install_command`);
* **the tools its commands name**: ``command.argv`` and ``setup.argv``'s program on ``PATH``,
  and for ``python -m MODULE`` that the project's ``python`` imports the module (gunicorn,
  uvicorn, alembic).

Nothing is started and nothing is written; a module is looked for by the project's interpreter
in a process of its own, with a bound on its time.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess  # nosec B404 - argv lists: the spec's own interpreter asked about one module
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from acklab.evidence.extras import EXTRAS, PACKAGES, install_command
from acklab.harness.specs.credentials import ENV_REF
from acklab.harness.specs.target import TargetSpec

EXTRA_MODULES = {"postgres": "psycopg", "sinks": "aiosmtpd"}
PROBE_TIMEOUT_S = 30.0


def _value(text: Any) -> str:
    """`text`, an ``env:NAME`` read when it is set ("" when not)."""
    if not isinstance(text, str):
        return ""
    match = ENV_REF.match(text)
    return os.environ.get(match.group(1), "") if match else text


def extras_needed(spec: TargetSpec) -> list[str]:
    """The extras `spec` uses."""
    effects = spec.effects
    urls = [
        _value(effects.sql.url if effects.sql is not None else None),
        _value(spec.database.url if spec.database is not None else None),
    ]
    needed = []
    if any(u.startswith(("postgresql", "postgres:")) for u in urls):
        needed.append("postgres")
    if effects.smtp is not None or effects.outbound is not None:
        needed.append("sinks")
    return needed


def _imports(python: str, module: str, cwd: Path) -> bool:
    try:
        done = subprocess.run(  # nosec B603
            [
                python,
                "-c",
                f"import importlib.util, sys; sys.exit(importlib.util.find_spec({module!r}) is None)",
            ],
            cwd=cwd,
            capture_output=True,
            timeout=PROBE_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def _tool(argv: Sequence[str] | None, field: str, cwd: Path) -> str | None:
    """Why `argv` cannot run here (its program not on PATH, its ``-m`` module not importable)."""
    if not argv:
        return None
    program = shutil.which(argv[0], path=os.environ.get("PATH")) if not os.path.isabs(argv[0]) else argv[0]
    if program is None or not os.access(program, os.X_OK):
        return f"{field}: {argv[0]!r} is not on PATH; install it, or activate the project's virtualenv"
    if len(argv) > 2 and argv[1] == "-m":
        module = argv[2].split(".", maxsplit=1)[0]
        if not _imports(program, module, cwd):
            return (
                f"{field}: {argv[0]} -m {argv[2]}: {program} cannot import {module}; pip install {module} into "
                "the project's virtualenv"
            )
    return None


def missing(spec: TargetSpec, *, spec_dir: Path) -> list[str]:
    """What this machine lacks to run `spec`: extras (with their pip command) and tools."""
    found = []
    for extra in extras_needed(spec):
        module = EXTRA_MODULES[extra]
        if importlib.util.find_spec(module) is None:
            found.append(
                f"the {extra} extra ({EXTRAS[extra]}): the Python package {PACKAGES[module][0]!r} is not "
                f"installed; {install_command(extra)}"
            )
    command = spec.command
    cwd = spec_dir / (command.cwd or "." if command is not None else ".")
    for field, argv in (
        ("command.argv", command.argv if command is not None else None),
        ("setup.argv", spec.setup.argv if spec.setup is not None else None),
    ):
        why = _tool(argv, field, cwd if cwd.is_dir() else spec_dir)
        if why is not None:
            found.append(why)
    return found
