"""The private PostgreSQL server starts wherever TMPDIR is, and listens on TCP only.

A Unix socket's path holds 107 bytes at most: a socket inside the server's own directory did not
fit under a sandbox's scratch/tmp on /dev/shm (the repair flow's pytest check then could not start
its server). The server makes no socket now; every client connects over 127.0.0.1.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest

from acklab.harness.procs.pgtemp import start_postgres

pytestmark = pytest.mark.postgres


def test_a_server_starts_under_a_tmpdir_too_long_for_a_socket_and_makes_none(monkeypatch):
    # Not under tmp_path: pytest's base directory is private to this user, and the server's user
    # (postgres, when this runs as root) must walk down to its directory.
    top = Path(tempfile.mkdtemp(prefix="acklab-long-tmpdir-"))
    deep = top / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    for part in (top, top / ("d" * 60), deep):
        part.chmod(0o755)
    monkeypatch.setattr(tempfile, "tempdir", str(deep))
    try:
        started_and_stopped(deep)
    finally:
        shutil.rmtree(top, ignore_errors=True)


def started_and_stopped(deep: Path) -> None:
    server = start_postgres()
    try:
        assert server.root.parent == deep
        assert len(str(server.root / "sock" / ".s.PGSQL.65535")) > 107, "a socket here could not be made"
        with server.connect() as conn:
            assert conn.execute("SHOW unix_socket_directories").fetchone() == ("",)
            assert conn.execute("SELECT inet_server_addr()::text").fetchone() == ("127.0.0.1/32",)
        assert not [p for p in server.root.rglob("*") if p.is_socket()]
    finally:
        server.stop()
    assert not server.root.exists()
