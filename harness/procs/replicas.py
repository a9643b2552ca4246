"""Several processes of one consumer, as production runs them behind a balancer (``topology.replicas``).

Each replica is the spec's ``command:`` started on a ``{{port}}`` of its own; all share the
database, the scratch directory and the services the lab started. To the rest of the lab
the set is one service: started and stopped together (in parallel: the slowest replica's
boot, not their sum), killed together by a crash experiment, ready when every replica is.
`ReplicaSet.restart` is a deploy: every replica stopped (SIGTERM, then SIGKILL after a
grace period), then started again and awaited ready; `restarts` keeps each one for the
timeline.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TypeVar

from acklab.harness.procs.service_process import ServiceProcess

T = TypeVar("T")


@dataclass(frozen=True)
class Restart:
    """One deploy of the whole set: when, and the processes before and after."""

    at_unix: float
    pids_before: tuple[int | None, ...]
    pids_after: tuple[int | None, ...]
    took_ms: float

    def as_dict(self) -> dict[str, object]:
        return {
            "at_unix": round(self.at_unix, 3),
            "pids_before": list(self.pids_before),
            "pids_after": list(self.pids_after),
            "took_ms": round(self.took_ms, 1),
        }


def _each(action: Callable[[ServiceProcess], T], replicas: Sequence[ServiceProcess]) -> list[T]:
    """`action` on every replica at once, their results in order; the first failure is raised once
    all have finished (no replica is left half started)."""
    if len(replicas) == 1:
        return [action(replicas[0])]
    with ThreadPoolExecutor(max_workers=len(replicas), thread_name_prefix="acklab-replica") as pool:
        futures = [pool.submit(action, replica) for replica in replicas]
        errors = [exc for f in futures if (exc := f.exception()) is not None]
    if errors:
        raise errors[0]
    return [f.result() for f in futures]


class ReplicaSet:
    """The replicas of one consumer, managed as one service."""

    what = "replicas of command:"

    def __init__(self, replicas: Sequence[ServiceProcess]) -> None:
        self.replicas = list(replicas)
        self.restarts: list[Restart] = []
        self._down: str | None = None

    @property
    def endpoint(self) -> str:
        return self.replicas[0].endpoint

    @property
    def origins(self) -> list[tuple[str, int]]:
        return [(r.host, r.port) for r in self.replicas]

    @property
    def starts(self) -> int:
        return sum(r.starts for r in self.replicas)

    @property
    def ready(self) -> bool:
        return all(r.ready for r in self.replicas)

    @property
    def down_reason(self) -> str | None:
        return self._down or next((r.down_reason for r in self.replicas if r.down_reason), None)

    @down_reason.setter
    def down_reason(self, why: str | None) -> None:
        self._down = why
        if why is None:
            for replica in self.replicas:
                replica.down_reason = None

    @property
    def pid(self) -> int | None:
        """The first replica's process (its group's leader), as `ServiceProcess.pid` names one."""
        return self.replicas[0].pid

    def pids(self) -> tuple[int | None, ...]:
        return tuple(r.pid if r.running() else None for r in self.replicas)

    def state(self) -> tuple[bool, int]:
        """(every replica ready, starts of them all): a restart of any one changes it."""
        return all(r.state()[0] for r in self.replicas), self.starts

    def running(self) -> bool:
        return all(r.running() for r in self.replicas)

    def start(self) -> None:
        """Start every replica that is not running and wait, in parallel, until each is ready.

        Each is launched from the calling thread, which outlives it: a sandbox's bubblewrap
        dies with the thread that started it (``--die-with-parent``)."""
        stopped = [r for r in self.replicas if not r.running()]
        for replica in stopped:
            replica.launch()
        _each(lambda r: r.await_ready(), stopped)

    def kill(self) -> int | None:
        """SIGKILL every replica (a crash of the whole service); the first one's exit code."""
        return _each(lambda r: r.kill(), self.replicas)[0]

    def stop(self) -> None:
        _each(lambda r: r.stop(), self.replicas)

    def restart(self) -> Restart:
        """A deploy: stop every replica, start them again, wait until each is ready."""
        before, started = self.pids(), time.monotonic()
        at = time.time()
        self.stop()
        self.start()
        restart = Restart(at, before, self.pids(), (time.monotonic() - started) * 1000)
        self.restarts.append(restart)
        return restart

    def log_tail(self, chars: int = 2000) -> str:
        return "\n".join(r.log_tail(chars // len(self.replicas)) for r in self.replicas)

    def log_bytes(self) -> bytes:
        if len(self.replicas) == 1:
            return self.replicas[0].log_bytes()
        return b"".join(
            f"=== acklab: replica {k} (port {r.port}) ===\n".encode() + r.log_bytes()
            for k, r in enumerate(self.replicas)
        )

    def remove_logs(self) -> None:
        for replica in self.replicas:
            replica.remove_logs()


def restart(service: ServiceProcess | ReplicaSet) -> Restart:
    """A deploy of `service`: one process or every replica, stopped and started again, ready."""
    if isinstance(service, ReplicaSet):
        return service.restart()
    before, started, at = (service.pid,), time.monotonic(), time.time()
    service.stop()
    service.start()
    return Restart(at, before, (service.pid,), (time.monotonic() - started) * 1000)
