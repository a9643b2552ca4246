"""The webhook fixture as a process of its own (`acklab serve fixture`), for crash experiments.

A crash must kill the whole server, mid-request, the way SIGKILL or a power cut does: only
a separate process can die like that while the lab watches. The process keeps its port
across restarts, so the sender retries to the same URL; it runs in its own session, so
the janitor can end its whole process group; and it is leased in the journal while alive.
"""

from __future__ import annotations

import os
import socket
import sys
import tempfile
import time
from pathlib import Path

import httpx

from acklab.harness.errors import HarnessError
from acklab.harness.leased_process import LeasedProcess
from acklab.harness.leases import NO_LEASES, LeaseBook

READY_TIMEOUT_S = 30.0
# `acklab serve fixture ...` without depending on where the console script was installed.
LAUNCHER = "import sys; from acklab.cli import main; main(sys.argv[1:])"


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


class FixtureProcess(LeasedProcess):
    """``acklab serve fixture`` on a fixed loopback port; start, kill -9 and restart it."""

    what = "fixture process"

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
        super().__init__(
            log_dir=log_dir or Path(tempfile.mkdtemp(prefix="acklab-fixture-log-")),
            log_prefix=f"fixture-{self.port}",
            leases=leases,
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, *, crash_after_commit: bool = False, processing_delay_ms: int = 0) -> None:
        """Start the fixture and wait until ``/health`` answers 200 (its database answers)."""
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
        self._spawn(
            [sys.executable, "-c", LAUNCHER, *args],
            env,
            lease_what=f"acklab serve fixture --handler {self.handler} --port {self.port}",
        )
        self._wait_ready()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        with httpx.Client(timeout=2.0, trust_env=False) as client:
            while time.monotonic() < deadline:
                if not self.running():
                    raise HarnessError(f"the fixture process exited while starting:\n{self.log_tail()}")
                try:
                    if client.get(f"{self.url}/health").status_code == 200:
                        self.ready = True
                        return
                except httpx.HTTPError:
                    pass
                time.sleep(0.05)
        self.kill()
        raise HarnessError(
            f"the fixture did not answer /health within {READY_TIMEOUT_S} s:\n{self.log_tail()}"
        )
