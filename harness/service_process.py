"""A target's own service, started by the lab from the spec's ``command:`` (argv, never a shell).

The lab starts it before the first trial and ends it when the run ends, even on error. It
runs in its own session (the janitor can end its whole process group) and is leased in
the journal while alive. The endpoint's port is fixed in the spec: the command must serve
there, so a restart after a crash serves the same URL the sender retries.

Its stdout and stderr go to a log file per start, in a temporary directory that is leased
too (the janitor removes it after a crash) and removed when the run ends; the run's
bundle keeps them as ``service.log`` (`ServiceProcess.log_bytes`: every start, capped at
`LOG_CAP_BYTES`; the bundle writer redacts it).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from acklab.harness.errors import TargetUnreachable
from acklab.harness.leased_process import LeasedProcess
from acklab.harness.leases import NO_LEASES, LeaseBook

DEFAULT_READY_TIMEOUT_S = 15.0
LOG_CAP_BYTES = 1 << 20  # service.log in a bundle: the first LOG_HEAD_BYTES and the rest from the end
LOG_HEAD_BYTES = 128 << 10


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


class ServiceProcess(LeasedProcess):
    """The service of ``command:``; start, kill -9 (the whole process group) and restart it."""

    what = "service of command:"

    def __init__(self, command: Command, endpoint: str, *, name: str, leases: LeaseBook = NO_LEASES) -> None:
        self.command, self.endpoint, self.name = command, endpoint, name
        self.host, self.port = host_port(endpoint)
        log_dir = Path(tempfile.mkdtemp(prefix="acklab-service-log-"))
        # Leased: a lab killed mid-run leaves the directory to the janitor, not to $TMPDIR forever.
        self._log_lease = leases.acquire("directory", str(log_dir), path=str(log_dir))
        self._kept_log: bytes | None = None
        super().__init__(log_dir=log_dir, log_prefix=f"service-{self.port}", leases=leases)

    def log_bytes(self, cap: int = LOG_CAP_BYTES) -> bytes:
        """The output of every start so far, oldest first, at most `cap` bytes (head and tail kept)."""
        if self._kept_log is not None:  # the directory is gone: what it held when it was removed
            return self._kept_log
        parts = []
        for n in range(1, self.starts + 1):
            path = self._log_dir / f"{self._log_prefix}-{n}.log"
            with contextlib.suppress(OSError):
                parts.append(
                    f"--- acklab: start {n} of the service of command: ---\n".encode() + path.read_bytes()
                )
        data = b"".join(parts)
        if len(data) <= cap:
            return data
        head, tail = data[:LOG_HEAD_BYTES], data[-(cap - LOG_HEAD_BYTES) :]
        cut = len(data) - len(head) - len(tail)
        return head + f"\n--- acklab: {cut} bytes cut (service.log keeps {cap} bytes) ---\n".encode() + tail

    def remove_logs(self) -> None:
        """Remove the log directory and release its lease; `log_bytes` keeps answering (capped)."""
        self._kept_log = self.log_bytes()
        shutil.rmtree(self._log_dir, ignore_errors=True)
        self._leases.release(self._log_lease, outcome="removed by its owner")

    def start(self) -> None:
        """Start the command and wait until the endpoint accepts connections."""
        if not self.running() and accepts(self.host, self.port):
            raise TargetUnreachable(
                f"target {self.name!r}: something already accepts connections at {self.host}:{self.port} "
                "before the lab started command:; stop it (the lab starts the service itself) or remove "
                "command: from the spec"
            )
        try:
            self._spawn(
                self.command.argv,
                {**os.environ, **self.command.env},
                lease_what=f"target {self.name} command: {self.command.argv[0]} (port {self.port})",
            )
        except OSError as exc:
            raise TargetUnreachable(
                f"target {self.name!r}: command.argv {list(self.command.argv)!r} could not start: {exc}"
            ) from exc
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
