"""Helpers for the sweep tests: the CLI as a subprocess and in-process, and reading a sweep back."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from acklab.cli import main

ACKLAB = [sys.executable, "-c", "import sys; from acklab.cli import main; main(sys.argv[1:])"]
# Distinctive, so that a match in any written byte can only be a leak.
PASSWORD = "Sw33p-n3ver-Wr1tten-7Q"


def acklab(*argv: str) -> int:
    """`acklab ARGV` in-process; its exit code."""
    with pytest.raises(SystemExit) as exited:
        main(list(argv))
    return int(exited.value.code or 0)


def run_cli(*argv: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    """`acklab ARGV` as a real process."""
    return subprocess.run([*ACKLAB, *argv], capture_output=True, text=True, timeout=timeout, check=False)


def with_password(url: str, password: str = PASSWORD) -> str:
    """The test server's URL (trust authentication) with a password in it, as a user would give it."""
    scheme, rest = url.split("://", 1)
    user, host = rest.split("@", 1)
    return f"{scheme}://{user}:{password}@{host}"


def sweep_dir(out: Path) -> Path:
    (found,) = [p.parent for p in out.glob("sweep-*/sweep.json")]
    return found


def read(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def cell(cells: list[dict[str, Any]], target: str, database: str, experiment: str) -> dict[str, Any]:
    (found,) = [
        c
        for c in cells
        if c["target"] == target and c["database"].startswith(database) and c["experiment"] == experiment
    ]
    return found


def every_byte_under(root: Path) -> list[tuple[Path, bytes]]:
    return [(p, p.read_bytes()) for p in sorted(root.rglob("*")) if p.is_file()]
