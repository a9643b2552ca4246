"""Hostile input (docs/hostile-input.md): `acklab janitor` acts only on leases whose resource proves it is the lab's.

Forged journal rows name an unrelated process (with its real pid and start time), a directory
outside the lab's temp root and one inside it the lab never made, and a database on a server
that asks for a password while PGPASSWORD is set. Nothing is killed, removed or sent; the
janitor says why and exits 4. A real lease of the lab is still cleaned.
"""

from __future__ import annotations

import os
import socket
import struct
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from acklab.evidence.journal import Journal, journal_path
from acklab.harness.procs.leases import LeaseBook, same_process_alive, start_ticks

GONE = {"pid": 2**22 + 7, "start_ticks": 1, "host": socket.gethostname()}  # a lab that died


def forge(out: Path, resource: str, detail: dict[str, Any], *, token: str | None = "f" * 32) -> None:
    payload: dict[str, Any] = {"resource": resource, "detail": detail, "owner": GONE}
    if token is not None:
        payload["token"] = token
    with Journal(journal_path(out)) as journal:
        key = detail.get("path") or detail.get("name") or detail.get("pid")
        journal.record(
            run_id="forged", kind="lease", name=f"{resource}:{key}", status="acquired", payload=payload
        )


def janitor(acklab: Any, out: Path) -> tuple[int, str]:
    code, _, err = acklab("janitor", "--out", out)
    return code, err


@pytest.fixture
def bystander() -> Iterator[subprocess.Popen[bytes]]:
    """A process that is not the lab's."""
    process = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        yield process
    finally:
        process.kill()
        process.wait()


@pytest.mark.parametrize("token", ["f" * 32, None], ids=["made-up-token", "no-token"])
def test_a_forged_process_lease_kills_nothing(tmp_path, acklab, bystander, token):
    pid = bystander.pid
    forge(tmp_path, "process", {"pid": pid, "pgid": pid, "start_ticks": start_ticks(pid)}, token=token)
    code, err = janitor(acklab, tmp_path)
    assert code == 4, err
    assert f"refused to touch process {pid}" in err
    assert same_process_alive(pid, start_ticks(pid))
    assert bystander.poll() is None


def test_a_forged_directory_lease_removes_nothing(tmp_path, acklab):
    outside = tmp_path / "acklab-precious"  # an acklab-* name, but not in the lab's temp root
    outside.mkdir()
    (outside / "data").write_text("keep me")
    unmarked = Path(tempfile.mkdtemp(prefix="acklab-victim-"))  # in the temp root, never the lab's
    (unmarked / "data").write_text("keep me too")
    try:
        forge(tmp_path, "directory", {"path": str(outside)})
        forge(tmp_path, "directory", {"path": str(unmarked)})
        forge(tmp_path, "directory", {"path": "/etc"})
        code, err = janitor(acklab, tmp_path)
        assert code == 4, err
        assert "is not an acklab-* directory in the lab's temp root" in err
        assert "holds no .acklab-lease with the lease's token" in err
        assert (outside / "data").read_text() == "keep me"
        assert (unmarked / "data").read_text() == "keep me too"
        assert Path("/etc/hostname").exists() or Path("/etc").is_dir()
    finally:
        for path in (unmarked,):
            (path / "data").unlink(missing_ok=True)
            path.rmdir()


class PasswordTrap:
    """A loopback TCP server that speaks just enough PostgreSQL to ask for a cleartext password."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.sock.settimeout(10)
        self.port = self.sock.getsockname()[1]
        self.received = b""
        self.connections = 0
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        try:
            while True:
                conn, _ = self.sock.accept()
                self.connections += 1
                with conn:
                    conn.settimeout(5)
                    data = conn.recv(65536)
                    while data[4:8] in (struct.pack("!I", 80877103), struct.pack("!I", 80877104)):
                        conn.sendall(b"N")  # no SSL, no GSS encryption: go on in the clear
                        data = conn.recv(65536)
                    self.received += data
                    conn.sendall(b"R" + struct.pack("!II", 8, 3))  # AuthenticationCleartextPassword
                    try:
                        while chunk := conn.recv(65536):
                            self.received += chunk
                    except OSError:
                        pass
        except OSError:
            return

    def close(self) -> None:
        self.sock.close()


def test_a_forged_database_lease_sends_no_credential_anywhere(tmp_path, acklab, monkeypatch):
    monkeypatch.setenv("PGPASSWORD", "s3cret-from-the-environment")
    trap = PasswordTrap()
    try:
        forge(
            tmp_path,
            "database",
            {"name": "acklab_x", "url": f"postgresql://victim@127.0.0.1:{trap.port}/acklab_x"},
        )
        forge(
            tmp_path,
            "database",
            {"name": "acklab_y", "url": "postgresql://victim@db.example.invalid/acklab_y"},
        )
        code, err = janitor(acklab, tmp_path)
    finally:
        trap.close()
    assert code == 4, err
    assert "refused to touch database 'acklab_x'" in err
    assert "names host 'db.example.invalid', not the loopback" in err
    assert trap.connections >= 1  # it did knock on the loopback door it was sent to ...
    assert b"victim" in trap.received
    assert b"s3cret" not in trap.received  # ... but with no password from the environment
    assert os.environ["PGPASSWORD"] == "s3cret-from-the-environment"  # restored for the caller


def test_a_real_lease_is_still_cleaned(tmp_path, acklab):
    directory = Path(tempfile.mkdtemp(prefix="acklab-real-"))
    with Journal(journal_path(tmp_path)) as journal:
        book = LeaseBook(journal, "run-real")
        book.acquire("directory", "real", path=str(directory))
    # The lab that held it died: rewrite its owner as a dead one (a new row, as a crash leaves it).
    with Journal(journal_path(tmp_path)) as journal:
        [entry] = [e for e in journal.history("run-real") if e.kind == "lease"]
        journal.record(
            run_id="run-dead",
            kind="lease",
            name=entry.name,
            status="acquired",
            payload={**entry.payload, "owner": GONE},
        )
    code, err = janitor(acklab, tmp_path)
    assert not directory.exists(), err
    assert f"removed {directory}" in err
    assert code == 0, err  # the first row's owner (this test's process) still runs: in use, left alone
