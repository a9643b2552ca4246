"""A private, temporary PostgreSQL server: initdb + pg_ctl in a temporary directory.

The test run, the benchmarks and `make demo` start one when they need PostgreSQL (the
concurrency experiments and the database-link faults). Debian's server refuses to run as
root, and CI runs as root, so as root every server command runs as the `postgres` user
(runuser). The server listens on 127.0.0.1 on a free port and on a Unix socket inside its
own directory, with trust authentication (loopback only, no password to leak); `stop()`
ends it and removes the directory. Its commands are argv lists of our own binaries, never a shell. Nothing is skipped when PostgreSQL is missing: `make
test` installs it first; `available()` lets the demo say so instead.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess  # nosec B404
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from acklab.harness.errors import HarnessError
from acklab.harness.ports import free_port


def available() -> bool:
    """Whether PostgreSQL's server binaries are installed (Debian package `postgresql`)."""
    try:
        _bindir()
    except PostgresUnavailable:
        return False
    return True


class PostgresUnavailable(HarnessError):
    """The temporary PostgreSQL server could not be found or started."""


def _bindir() -> Path:
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), reverse=True)
    if candidates:
        return Path(candidates[0]).parent
    found = shutil.which("initdb")
    if found:
        return Path(found).parent
    raise PostgresUnavailable(
        "PostgreSQL server binaries not found (Debian package postgresql); `make test` installs it when run as root"
    )


@dataclass
class PostgresServer:
    """A running private server; `url(db)` gives a SQLAlchemy URL (psycopg 3)."""

    root: Path
    port: int
    bindir: Path
    user: str = "postgres"

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg://{self.user}@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str | None = None) -> str:
        """Create a fresh database and return its URL (every test gets its own)."""
        import psycopg

        from acklab.harness.procs.leases import current_book

        name = name or f"t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(
            host="127.0.0.1", port=self.port, user=self.user, dbname="postgres", autocommit=True
        ) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        # Inside a run, the database is leased (and marked with the lease's token in its comment).
        current_book().acquire("database", name, name=name, url=self.url(name))
        return self.url(name)

    def stop(self) -> None:
        _as_postgres([str(self.bindir / "pg_ctl"), "-D", str(self.root / "data"), "-m", "immediate", "stop"])
        shutil.rmtree(self.root, ignore_errors=True)


def _as_postgres(cmd: list[str]) -> subprocess.CompletedProcess[str]:
    if os.geteuid() == 0:
        cmd = ["runuser", "-u", "postgres", "--", *cmd]
    return subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=120)  # nosec B603


def start_postgres() -> PostgresServer:
    """initdb a fresh cluster in a temporary directory and start it; raise with its log on failure."""
    bindir = _bindir()
    root = Path(tempfile.mkdtemp(prefix="acklab-pg-"))
    data, sock = root / "data", root / "sock"
    sock.mkdir()
    if os.geteuid() == 0:  # the server runs as `postgres`: hand it its (private, 0o700) directories
        shutil.chown(root, "postgres")
        shutil.chown(sock, "postgres")
    res = _as_postgres(
        [str(bindir / "initdb"), "-D", str(data), "-U", "postgres", "-A", "trust", "-E", "UTF8"]
    )
    if res.returncode != 0:
        raise PostgresUnavailable(f"initdb failed: {res.stderr[-2000:]}")
    port = free_port()
    opts = f"-p {port} -k {sock} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200"
    res = _as_postgres(
        [
            str(bindir / "pg_ctl"),
            "-D",
            str(data),
            "-l",
            str(root / "log"),
            "-o",
            opts,
            "-w",
            "-t",
            "60",
            "start",
        ]
    )
    if res.returncode != 0:
        log = (root / "log").read_text() if (root / "log").exists() else ""
        raise PostgresUnavailable(f"pg_ctl start failed: {res.stderr[-1000:]} {log[-2000:]}")
    server = PostgresServer(root=root, port=port, bindir=bindir)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return server
        except OSError:
            time.sleep(0.1)
    server.stop()
    raise PostgresUnavailable("PostgreSQL did not accept connections within 30 s")
