"""A target's own service, started by the lab from the spec's ``command:`` (argv, never a shell).

The lab starts it before the first trial and ends it when the run ends, even on error. It
runs in its own session (the janitor can end its whole process group) and is leased in
the journal while alive. The endpoint's port is fixed in the spec: the command must serve
there, so a restart after a crash serves the same URL the sender retries.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess  # nosec B404
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from harness.errors import HarnessError, TargetUnreachable
from harness.leases import NO_LEASES, Lease, LeaseBook, start_ticks

DEFAULT_READY_TIMEOUT_S = 15.0


@dataclass(frozen=True)
class Command:
    """``command:`` of a target spec: how the lab starts the service."""

    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict, repr=False)
    ready_timeout_s: float = DEFAULT_READY_TIMEOUT_S


def host_port(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    return parts.hostname or "127.0.0.1", parts.port or (443 if parts.scheme == "https" else 80)


def accepts(host: str, port: int, timeout_s: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


class ServiceProcess:
    """The service of ``command:``; start, kill -9 (the whole process group) and restart it."""

    def __init__(self, command: Command, endpoint: str, *, name: str, leases: LeaseBook = NO_LEASES) -> None:
        self.command, self.endpoint, self.name = command, endpoint, name
        self.host, self.port = host_port(endpoint)
        self._leases = leases
        self._log_dir = Path(tempfile.mkdtemp(prefix="acklab-service-log-"))
        self._proc: subprocess.Popen[bytes] | None = None
        self._lease: Lease | None = None
        self._log: Path | None = None
        self.starts = 0

    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> None:
        """Start the command and wait until the endpoint accepts connections."""
        if self.running():
            raise HarnessError(f"the service of target {self.name!r} is still running; kill it first")
        if accepts(self.host, self.port):
            raise TargetUnreachable(
                f"target {self.name!r}: something already accepts connections at {self.host}:{self.port} "
                "before the lab started command:; stop it (the lab starts the service itself) or remove "
                "command: from the spec"
            )
        self.starts += 1
        self._log = self._log_dir / f"service-{self.port}-{self.starts}.log"
        env = {**os.environ, **self.command.env}
        try:
            with self._log.open("wb") as log:
                # argv as a list, no shell: the spec's own command, run as the user who runs the lab.
                self._proc = subprocess.Popen(  # nosec B603
                    list(self.command.argv),
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    env=env,
                    start_new_session=True,  # its own process group: a crash and the janitor end all of it
                )
        except OSError as exc:
            raise TargetUnreachable(
                f"target {self.name!r}: command.argv {list(self.command.argv)!r} could not start: {exc}"
            ) from exc
        pid = self._proc.pid
        self._lease = self._leases.acquire(
            "process",
            f"{pid}:{start_ticks(pid)}",
            pid=pid,
            pgid=pid,
            start_ticks=start_ticks(pid),
            what=f"target {self.name} command: {self.command.argv[0]} (port {self.port})",
        )
        self._wait_ready()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.command.ready_timeout_s
        while time.monotonic() < deadline:
            if not self.running():
                code = self._proc.returncode if self._proc else None
                self._finish()
                raise TargetUnreachable(
                    f"target {self.name!r}: the service of command: exited ({code}) while starting:\n"
                    f"{self.log_tail()}"
                )
            if accepts(self.host, self.port):
                return
            time.sleep(0.05)
        self.kill()
        raise TargetUnreachable(
            f"target {self.name!r}: nothing accepted connections at {self.host}:{self.port} within "
            f"command.ready_timeout_s={self.command.ready_timeout_s} s of starting command:; "
            f"serve on the endpoint's port, or raise ready_timeout_s:\n{self.log_tail()}"
        )

    def kill(self) -> int | None:
        """SIGKILL the service's whole process group, as a crash would; its return code."""
        if self._proc is None:
            return None
        if self._proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._proc.pid, signal.SIGKILL)
        code = self._proc.wait(10)
        self._finish()
        return code

    def stop(self) -> None:
        """End the service (SIGTERM to its group, then SIGKILL after a grace period)."""
        if self._proc is not None and self._proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._proc.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._proc.wait(5)
        self.kill()

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
