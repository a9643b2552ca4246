"""The consumer's workers (``workers:``): processes that take jobs off a queue and do the effect.

Each entry of ``workers:`` is a command started ``count`` times, like ``command:`` (argv,
never a shell; its own session; leased; confined in the consumer's place when it is) but
without a port: a worker is ready when its output shows the line ``ready.log`` names
(Celery's ``ready.``, Dramatiq's ``Worker process is ready for action.``), or when
``ready.url`` answers as ``ready.status`` says, or — with neither — once it has run
`SETTLE_S` without exiting. A kill is a crash (SIGKILL to the whole group); `WorkerPool.freeze`
stops a worker where it stands (SIGSTOP), as a job that runs long does, and `thaw` lets it go
on; a killed worker is started again as its supervisor would. Which worker a Redis client is
(`WorkerPool.owner`) is read from the machine: the worker whose processes hold the socket.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from acklab.harness.errors import HarnessError, TargetUnreachable
from acklab.harness.procs.confinement import Bridged, Confined
from acklab.harness.procs.leased_process import LeasedProcess, live_members
from acklab.harness.procs.leases import NO_LEASES, LeaseBook
from acklab.harness.procs.service_process import DEFAULT_READY_TIMEOUT_S, wait_ready

SETTLE_S = 0.5
ESTABLISHED = "01"  # the state column of /proc/net/tcp
POLL_S = 0.05
LOG_CAP_BYTES = 256 << 10
T = TypeVar("T")


@dataclass(frozen=True)
class WorkerCommand:
    """One entry of ``workers:``."""

    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict, repr=False)
    cwd: Path | None = None
    count: int = 1
    ready_log: str | None = None  # a regular expression a line of its output matches once it is ready
    ready_url: str | None = None
    ready_status: tuple[int, ...] = ()
    ready_timeout_s: float = DEFAULT_READY_TIMEOUT_S


class WorkerProcess(LeasedProcess):
    """One worker: start, kill -9, freeze, thaw."""

    what = "worker of workers:"

    def __init__(
        self,
        command: WorkerCommand,
        name: str,
        log_dir: Path,
        *,
        leases: LeaseBook,
        confined: Confined | None,
        reaches: tuple[int, ...] = (),
    ) -> None:
        super().__init__(log_dir=log_dir, log_prefix=name.replace(" ", "-"), leases=leases)
        self.command, self.name, self.confined = command, name, confined
        # Confined: a network of its own that serves nothing and reaches the lab's ports the
        # consumer's service does (the broker, the database, the sinks), through the lab's bridge.
        self.network = Bridged(reaches=reaches)
        self.frozen = False

    def launch(self) -> None:
        """Start it without waiting (from a thread that outlives it: bubblewrap dies with its thread)."""
        env = dict(self.command.env) if self.confined is not None else {**os.environ, **self.command.env}
        try:
            self._spawn(
                self.command.argv,
                env,
                lease_what=f"{self.name}: {self.command.argv[0]}",
                cwd=self.command.cwd,
                confined=self.confined,
                network=self.network,
            )
        except OSError as exc:
            raise TargetUnreachable(
                f"{self.name}: argv {list(self.command.argv)!r} could not start"
                + (f" in cwd {str(self.command.cwd)!r}" if self.command.cwd else "")
                + f": {exc}"
            ) from exc
        self.frozen = False

    def await_ready(self) -> None:
        command = self.command
        deadline = time.monotonic() + command.ready_timeout_s
        if command.ready_url is not None:
            ready, seen = wait_ready(
                command.ready_url, command.ready_status, command.ready_timeout_s, alive=self.running
            )
        elif command.ready_log is not None:
            pattern = re.compile(command.ready_log)
            ready, seen = False, f"no line matching {command.ready_log!r} yet"
            while self.running() and time.monotonic() < deadline:
                if pattern.search(self.log_tail(LOG_CAP_BYTES)):
                    ready = True
                    break
                time.sleep(POLL_S)
        else:
            time.sleep(SETTLE_S)
            ready, seen = self.running(), f"it ran {SETTLE_S:g} s"
        if ready and self.running():
            self.ready = True
            return
        alive = self.running()
        self.kill()
        rule = f"ready.log {command.ready_log!r}" if command.ready_log else f"ready.url {command.ready_url!r}"
        raise TargetUnreachable(
            f"{self.name}: "
            + (
                f"never became ready within ready_timeout_s={command.ready_timeout_s:g} s ({rule}; last: {seen})"
                if alive
                else "exited while starting"
            )
            + f":\n{self.log_tail()}"
        )

    def _signal(self, sig: signal.Signals) -> None:
        if self._proc is not None and self.running():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self._proc.pid, sig)

    def freeze(self) -> None:
        """SIGSTOP every process of the worker: it holds what it took and does nothing more."""
        self._signal(signal.SIGSTOP)
        self.frozen = True

    def thaw(self) -> None:
        self._signal(signal.SIGCONT)
        self.frozen = False

    def kill(self) -> int | None:
        self.thaw()  # a stopped process dies of SIGKILL all the same; its group's waiters need it gone
        return super().kill()

    def stop(self) -> None:
        self.thaw()
        super().stop()

    def processes(self) -> list[int]:
        return live_members(self._proc.pid) if self._proc is not None and self.running() else []


def socket_inodes(pids: Sequence[int]) -> set[str]:
    """The socket inodes the processes `pids` hold open (unreadable ones are skipped)."""
    found: set[str] = set()
    for pid in pids:
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    link = os.readlink(f"/proc/{pid}/fd/{fd}")
                    if link.startswith("socket:["):
                        found.add(link[8:-1])
    return found


def inode_of_port(port: int) -> str | None:
    """The inode of the TCP socket whose local port is `port` (a client's end, on loopback)."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table, encoding="ascii") as lines:
            next(lines, None)
            for line in lines:
                parts = line.split()
                # Established only: a closed connection that used the port lingers in TIME_WAIT
                # (inode 0), and Linux reuses such ports on loopback.
                if (
                    len(parts) > 9
                    and parts[3] == ESTABLISHED
                    and int(parts[1].rpartition(":")[2], 16) == port
                ):
                    return parts[9]
    return None


def _each(action: Callable[[WorkerProcess], T], workers: Sequence[WorkerProcess]) -> list[T]:
    if len(workers) <= 1:
        return [action(w) for w in workers]
    with ThreadPoolExecutor(max_workers=len(workers), thread_name_prefix="acklab-worker") as pool:
        futures = [pool.submit(action, w) for w in workers]
        errors = [exc for f in futures if (exc := f.exception()) is not None]
    if errors:
        raise errors[0]
    return [f.result() for f in futures]


class WorkerPool:
    """Every worker of ``workers:``, managed together and one by one."""

    def __init__(
        self,
        commands: Sequence[WorkerCommand],
        *,
        leases: LeaseBook = NO_LEASES,
        confined: Confined | None = None,
        reaches: tuple[int, ...] = (),
    ) -> None:
        self._log_dir = Path(tempfile.mkdtemp(prefix="acklab-workers-log-"))
        self._log_lease = leases.acquire("directory", str(self._log_dir), path=str(self._log_dir))
        self._leases = leases
        self.workers: list[WorkerProcess] = []
        for k, command in enumerate(commands, start=1):
            for n in range(1, command.count + 1):
                name = f"worker {k}" + (f".{n}" if command.count > 1 else "")
                self.workers.append(
                    WorkerProcess(
                        command, name, self._log_dir, leases=leases, confined=confined, reaches=reaches
                    )
                )

    def __len__(self) -> int:
        return len(self.workers)

    def by_name(self, name: str) -> WorkerProcess:
        found = next((w for w in self.workers if w.name == name), None)
        if found is None:
            raise HarnessError(f"no worker called {name!r} (the workers are {', '.join(self.names)})")
        return found

    @property
    def names(self) -> list[str]:
        return [w.name for w in self.workers]

    def start(self, only: Sequence[WorkerProcess] | None = None) -> None:
        """Start the workers not running (launched from this thread), and wait until each is ready."""
        stopped = [w for w in (self.workers if only is None else only) if not w.running()]
        for worker in stopped:
            worker.launch()
        _each(lambda w: w.await_ready(), stopped)

    def running(self) -> bool:
        return all(w.running() for w in self.workers)

    def kill(self, workers: Sequence[WorkerProcess]) -> None:
        _each(lambda w: w.kill(), workers)

    def restart(self, workers: Sequence[WorkerProcess]) -> None:
        """Start killed workers again, as their supervisor (systemd, Kubernetes) would."""
        self.start(workers)

    def freeze(self, workers: Sequence[WorkerProcess] | None = None) -> None:
        for worker in self.workers if workers is None else workers:
            worker.freeze()

    def thaw(self, workers: Sequence[WorkerProcess] | None = None) -> None:
        for worker in self.workers if workers is None else workers:
            worker.thaw()

    def pids(self) -> dict[str, int | None]:
        return {w.name: w.pid if w.running() else None for w in self.workers}

    def owner(self, port: int) -> str | None:
        """The worker holding the TCP connection whose local port is `port` (None: no worker's)."""
        inode = inode_of_port(port)
        if inode is None:
            return None
        return next((w.name for w in self.workers if inode in socket_inodes(w.processes())), None)

    def stop(self) -> None:
        _each(lambda w: w.stop(), self.workers)

    def log_bytes(self) -> bytes:
        parts = []
        for worker in self.workers:
            for n in range(1, worker.starts + 1):
                path = self._log_dir / f"{worker.name.replace(' ', '-')}-{n}.log"
                with contextlib.suppress(OSError):
                    data = path.read_bytes()
                    parts.append(
                        f"--- acklab: {worker.name}, start {n} ---\n".encode() + data[-LOG_CAP_BYTES:]
                    )
        return b"".join(parts)

    def close(self) -> bytes:
        """Stop every worker, remove the logs (what they said is returned), release the lease."""
        self.stop()
        kept = self.log_bytes()
        shutil.rmtree(self._log_dir, ignore_errors=True)
        self._leases.release(self._log_lease, outcome="removed by its owner")
        return kept
