"""Helpers for the sweep tests: the CLI as a subprocess and in-process, and reading a sweep back."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from acklab.cli import main
from acklab.harness.procs.pgtemp import PostgresServer

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


def with_password(server: PostgresServer, url: str, password: str = PASSWORD) -> str:
    """`url`'s database owned by a role of its own that logs in with `password`, as a user would
    give it: the server's own superuser password is drawn per server and unknown to the test, and
    a known one is what lets the tests look for it in every byte written."""
    database = url.rsplit("/", 1)[1]
    role = f"sweeper_{database}"
    with server.connect() as conn:
        conn.execute(f"CREATE ROLE \"{role}\" LOGIN PASSWORD '{password}'")
        conn.execute(f'ALTER DATABASE "{database}" OWNER TO "{role}"')
        conn.execute(f'GRANT CONNECT ON DATABASE "{database}" TO "{role}"')
    with server.connect(database) as conn:
        conn.execute(f'ALTER SCHEMA public OWNER TO "{role}"')
    return f"postgresql+psycopg://{role}:{password}@127.0.0.1:{server.port}/{database}"


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
