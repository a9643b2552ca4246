"""Redis for the consumer: Debian's ``redis-server`` on a port and a directory of the run's own.

Started before the consumer and stopped after it, on loopback only, with nothing persisted
(``--save ""``, no append-only file): each run starts empty. It runs like the consumer — in
its confined place when the consumer is confined, under the run's shifted clock when there
is one (`harness.procs.clock`), since a TTL kept by Redis runs on Redis's clock. Ready when
it answers ``PING``; `RedisServer.unix_time` reads its clock (``TIME``) for the proof that a
shift landed.
"""

from __future__ import annotations

import os
import shutil
import socket
import time
from pathlib import Path

from acklab.harness.errors import TargetUnreachable
from acklab.harness.procs.clock import ShiftedClock
from acklab.harness.procs.confinement import Bridged, Confined
from acklab.harness.procs.leased_process import LeasedProcess
from acklab.harness.procs.leases import NO_LEASES, LeaseBook
from acklab.harness.procs.service_process import accepts
from acklab.harness.services.resp import Connection, RespError

PROGRAM = "redis-server"
READY_TIMEOUT_S = 15.0
POLL_S = 0.02


def command(port: int, directory: Path) -> tuple[str, ...]:
    """The server's argv: loopback only, no persistence, its own directory, logs on stdout."""
    return (
        PROGRAM,
        *("--port", str(port), "--bind", "127.0.0.1", "--protected-mode", "yes"),
        *("--dir", str(directory), "--save", "", "--appendonly", "no"),
        *("--daemonize", "no", "--logfile", "", "--loglevel", "warning"),
    )


def ask(port: int, *words: str, timeout_s: float = 1.0) -> bytes:
    """One RESP command to the server on `port`; its raw reply (OSError when it cannot be read)."""
    request = f"*{len(words)}\r\n".encode() + b"".join(
        f"${len(w.encode())}\r\n".encode() + w.encode() + b"\r\n" for w in words
    )
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as conn:
        conn.sendall(request)
        reply = b""
        while not reply.endswith(b"\r\n") or (reply.startswith(b"*") and reply.count(b"\r\n") < 5):
            chunk = conn.recv(4096)
            if not chunk:
                break
            reply += chunk
    return reply


class RedisServer(LeasedProcess):
    """One ``redis-server`` of a run: start, kill -9, stop, restart, and read its clock."""

    what = "redis-server the lab started"

    def __init__(
        self,
        port: int,
        directory: Path,
        log_dir: Path,
        *,
        leases: LeaseBook = NO_LEASES,
        confined: Confined | None = None,
        clock: ShiftedClock | None = None,
    ) -> None:
        super().__init__(log_dir=log_dir, log_prefix=f"redis-{port}", leases=leases)
        self.port, self.directory, self.confined, self.clock = port, directory, confined, clock

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        if shutil.which(PROGRAM) is None:
            raise TargetUnreachable(
                f"services: [redis] needs Debian's {PROGRAM} (apt-get install redis-server); it is not on PATH"
            )
        if not self.running() and accepts("127.0.0.1", self.port):
            raise TargetUnreachable(
                f"services: redis: something already accepts connections on 127.0.0.1:{self.port}; the lab "
                "starts its own redis-server on a free port (stop whatever holds it)"
            )
        argv = command(self.port, self.directory)
        self._spawn(
            self.clock.wrap(argv) if self.clock is not None else argv,
            {} if self.confined is not None else dict(os.environ),
            lease_what=f"services: redis (port {self.port})",
            cwd=self.directory if self.confined is None else None,
            confined=self.confined,
            network=Bridged(serves=(self.port,)),  # the lab and its consumer reach it on its port
        )
        deadline = time.monotonic() + READY_TIMEOUT_S
        seen = "nothing yet"
        while time.monotonic() < deadline:
            if not self.running():
                break
            try:
                reply = ask(self.port, "PING")
            except OSError as exc:
                seen = str(exc)
            else:
                if reply.startswith(b"+PONG"):
                    self.ready = True
                    return
                seen = reply[:200].decode(errors="replace")
            time.sleep(POLL_S)
        alive = self.running()
        self.kill()
        raise TargetUnreachable(
            f"services: redis on port {self.port} "
            + ("never answered PING" if alive else "exited while starting")
            + f" within {READY_TIMEOUT_S:g} s (last: {seen}):\n{self.log_tail()}"
        )

    def restart_persisted(self) -> None:
        """Restart it as a broker is restarted in production: ``SHUTDOWN SAVE`` writes what it holds
        to its directory, and the new server loads it from there (its clients lose their connections)."""
        if self.running():
            try:
                with Connection(self.port) as conn:
                    conn.command("SHUTDOWN", "SAVE")
            except (ConnectionError, OSError):
                pass  # the server closes the connection as it goes down: that is the answer
            except RespError as exc:
                raise TargetUnreachable(
                    f"services: redis on port {self.port} refused SHUTDOWN SAVE: {exc}"
                ) from exc
            if self.wait_exit(READY_TIMEOUT_S) is None:
                self.kill()
        self.start()

    def unix_time(self) -> float | None:
        """The server's clock (``TIME``), in Unix seconds; None when it cannot be read."""
        try:
            reply = ask(self.port, "TIME")
        except OSError:
            return None
        numbers = [line for line in reply.split(b"\r\n") if line.isdigit()]
        if len(numbers) != 2:
            return None
        return int(numbers[0]) + int(numbers[1]) / 1e6
