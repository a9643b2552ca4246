"""A private, temporary PostgreSQL server: initdb + pg_ctl in a temporary directory.

The test run, the benchmarks and `make demo` start one when they need PostgreSQL (the
concurrency experiments and the database-link faults). Debian's server refuses to run as
root, and CI runs as root, so as root every server command runs as the `postgres` user
(runuser). The server listens on 127.0.0.1 on a free port, and on no Unix socket. It never
trusts a connection: every role logs in with a password (SCRAM), the superuser's drawn fresh for
each server and known to the process that started it only (its URLs carry it), so code the lab
serves — which can reach this port — cannot log in as anyone but the role it was given. `stop()` ends it and removes the directory. Its commands are argv
lists of our own binaries, never a shell. Nothing is skipped when PostgreSQL is missing:
`make test` installs it first; `available()` lets the demo say so instead.
"""

from __future__ import annotations

import glob
import os
import secrets
import shutil
import socket
import subprocess  # nosec B404
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

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
    """A running private server; `url(db)` gives a SQLAlchemy URL (psycopg 3) with the superuser's
    password; `connect()` a psycopg connection as the superuser."""

    root: Path
    port: int
    bindir: Path
    user: str = "postgres"
    password: str = field(default="", repr=False)

    def url(self, database: str = "postgres") -> str:
        login = f"{self.user}:{quote(self.password, safe='')}" if self.password else self.user
        return f"postgresql+psycopg://{login}@127.0.0.1:{self.port}/{database}"

    def connect(self, database: str = "postgres") -> Any:
        """An autocommit psycopg connection to `database` as the superuser."""
        import psycopg

        return psycopg.connect(
            host="127.0.0.1",
            port=self.port,
            user=self.user,
            password=self.password or None,
            dbname=database,
            autocommit=True,
        )

    def create_database(self, name: str | None = None) -> str:
        """Create a fresh database and return its URL (every test gets its own). No other role may
        connect to it unless granted (CONNECT is taken from PUBLIC)."""
        from acklab.harness.procs.leases import current_book

        name = name or f"t_{uuid.uuid4().hex[:12]}"
        with self.connect() as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
            conn.execute(f'REVOKE CONNECT, TEMPORARY ON DATABASE "{name}" FROM PUBLIC')
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
    data = root / "data"
    password = secrets.token_urlsafe(24)
    pwfile = root / "pwfile"
    pwfile.write_text(password + "\n", encoding="utf-8")
    pwfile.chmod(0o600)
    if os.geteuid() == 0:  # the server runs as `postgres`: hand it its (private, 0o700) directories
        for path in (root, pwfile):
            shutil.chown(path, "postgres")
    auth = ["--auth-local=scram-sha-256", "--auth-host=scram-sha-256", f"--pwfile={pwfile}"]
    res = _as_postgres([str(bindir / "initdb"), "-D", str(data), "-U", "postgres", "-E", "UTF8", *auth])
    pwfile.unlink()  # the password lives in this process only
    if res.returncode != 0:
        raise PostgresUnavailable(f"initdb failed: {res.stderr[-2000:]}")
    port = free_port()
    # No Unix socket (-k ''): every client connects over TCP, and a socket's path (107 bytes at most)
    # would have to fit under a TMPDIR of any length (a sandbox's scratch/tmp on /dev/shm did not).
    opts = f"-p {port} -k '' -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200"
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
    server = PostgresServer(root=root, port=port, bindir=bindir, password=password)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return server
        except OSError:
            time.sleep(0.1)
    server.stop()
    raise PostgresUnavailable("PostgreSQL did not accept connections within 30 s")
