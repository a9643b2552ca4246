"""The webhook fixture as a process of its own (`acklab serve fixture`), for crash experiments.

A crash must kill the whole server, mid-request, the way SIGKILL or a power cut does: only
a separate process can die like that while the lab watches. The process keeps its port
across restarts, so the sender retries to the same URL; it runs in its own session, so
the janitor can end its whole process group; and it is leased in the journal while alive.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess  # nosec B404
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from harness.errors import HarnessError
from harness.leases import NO_LEASES, Lease, LeaseBook, same_process_alive, start_ticks

READY_TIMEOUT_S = 30.0
# `acklab serve fixture ...` without depending on where the console script was installed.
LAUNCHER = "import sys; from acklab.cli import main; main(sys.argv[1:])"


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


class FixtureProcess:
    """``acklab serve fixture`` on a fixed loopback port; start, kill -9 and restart it."""

    def __init__(
        self,
        *,
        handler: str,
        database_url: str,
        secret: str,
        scheme: str = "standard",
        leases: LeaseBook = NO_LEASES,
        log_dir: Path | None = None,
    ) -> None:
        self.handler, self.database_url, self.scheme = handler, database_url, scheme
        self._secret = secret
        self.port = free_port()
        self._leases = leases
        self._log_dir = log_dir or Path(tempfile.mkdtemp(prefix="acklab-fixture-log-"))
        self._proc: subprocess.Popen[bytes] | None = None
        self._lease: Lease | None = None
        self._log: Path | None = None
        self.starts = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def start(self, *, crash_after_commit: bool = False, processing_delay_ms: int = 0) -> None:
        """Start the fixture and wait until ``/health`` answers 200 (its database answers)."""
        if self._proc is not None and self._proc.poll() is None:
            raise HarnessError(f"the fixture process {self._proc.pid} is still running; kill it first")
        self._finish()
        args = ["serve", "fixture", "--handler", self.handler]
        args += ["--scheme", self.scheme, "--port", str(self.port), "--log-level", "warning"]
        if crash_after_commit:
            args.append("--crash-after-commit")
        if processing_delay_ms:
            args += ["--processing-delay-ms", str(processing_delay_ms)]
        # Secrets travel in the environment, not argv: a database URL may carry a password,
        # and any local user can read a process's arguments with ps.
        env = {
            **os.environ,
            "ACKLAB_WEBHOOK_SECRET": self._secret,
            "ACKLAB_DATABASE_URL": self.database_url,
            "PYTHONUNBUFFERED": "1",
        }
        self.starts += 1
        self._log = self._log_dir / f"fixture-{self.port}-{self.starts}.log"
        with self._log.open("wb") as log:
            # Our own interpreter and CLI, arguments as a list, no shell.
            self._proc = subprocess.Popen(  # nosec B603
                [sys.executable, "-c", LAUNCHER, *args],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,  # its own process group: the janitor ends all of it
            )
        pid = self._proc.pid
        self._lease = self._leases.acquire(
            "process",
            f"{pid}:{start_ticks(pid)}",
            pid=pid,
            pgid=pid,
            start_ticks=start_ticks(pid),
            what=f"acklab serve fixture --handler {self.handler} --port {self.port}",
        )
        self._wait_ready()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        with httpx.Client(timeout=2.0, trust_env=False) as client:
            while time.monotonic() < deadline:
                if self._proc is None or self._proc.poll() is not None:
                    raise HarnessError(f"the fixture process exited while starting:\n{self.log_tail()}")
                try:
                    if client.get(f"{self.url}/health").status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
                time.sleep(0.05)
        self.kill()
        raise HarnessError(
            f"the fixture did not answer /health within {READY_TIMEOUT_S} s:\n{self.log_tail()}"
        )

    def wait_exit(self, timeout_s: float) -> int | None:
        """Wait for the process to end on its own (the crash hook); its return code, or None."""
        if self._proc is None:
            return None
        try:
            code = self._proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            return None
        self._finish()
        return code

    def kill(self) -> int | None:
        """SIGKILL the fixture's whole process group, as a crash would; its return code."""
        if self._proc is None:
            return None
        if self._proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._proc.pid, signal.SIGKILL)
        code = self._proc.wait(10)
        self._finish()
        return code

    def stop(self) -> None:
        """End the fixture (SIGTERM, then SIGKILL after a grace period)."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._proc.wait(5)
        self.kill()

    def alive(self) -> bool:
        return (
            self._proc is not None and same_process_alive(self._proc.pid, None) and self._proc.poll() is None
        )

    def log_tail(self, chars: int = 2000) -> str:
        if self._log is None or not self._log.exists():
            return ""
        return self._log.read_text(errors="replace")[-chars:]

    def _finish(self) -> None:
        if self._lease is not None:
            self._leases.release(
                self._lease, outcome=f"ended (exit {self._proc.returncode if self._proc else None})"
            )
            self._lease = None

    def __enter__(self) -> FixtureProcess:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()
