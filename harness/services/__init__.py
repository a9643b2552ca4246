"""Services the lab starts for a consumer (``services:`` of a target spec): one kind per service.

A consumer needs more than its own process: a Redis for its dedupe keys or its queue, a
database. The lab starts each service it names on a port and a directory of the run's own,
before the consumer, and stops it after; each fills a run placeholder (``{{redis_url}}``).
A kind declares itself once here (`KINDS`): its name in ``services:``, its placeholder, the
program it runs, and how to start one. PostgreSQL stays where it was (``database:`` and
``{{database_url}}``, `harness.targets.isolation`): the lab creates a database on a server it
is given rather than starting a server.

Two steps, never one: `Services.allocate` picks the ports and directories (the spec is
filled with them), `Services.start` starts the servers (on the run's shifted clock, in the
consumer's confined place, when there are). `Services.stop` ends them; everything is leased
in the run's journal in between, so `acklab janitor` ends what a killed lab left.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from acklab.harness.errors import HarnessError, SpecError
from acklab.harness.procs.clock import ShiftedClock
from acklab.harness.procs.confinement import Confined
from acklab.harness.procs.leases import Lease, LeaseBook, current_book
from acklab.harness.services.redis import PROGRAM as REDIS_PROGRAM
from acklab.harness.services.redis import RedisServer


class Server(Protocol):
    """One running service (a `harness.procs.leased_process.LeasedProcess` that knows how it starts)."""

    @property
    def pid(self) -> int | None: ...

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def kill(self) -> int | None: ...

    def running(self) -> bool: ...

    def log_tail(self, chars: int = 2000) -> str: ...

    def unix_time(self) -> float | None:
        """The service's own clock (None: it cannot tell)."""
        ...


@dataclass(frozen=True)
class ServiceKind:
    """One kind of service a spec may name in ``services:``."""

    name: str
    placeholder: str  # the run placeholder it fills
    program: str  # what must be installed (named when it is not)
    # (port, its directory, the log directory, leases, confined place, clock) -> the server
    make: Callable[..., Server]
    url: Callable[[int], str]


KINDS: dict[str, ServiceKind] = {
    "redis": ServiceKind(
        name="redis",
        placeholder="redis_url",
        program=REDIS_PROGRAM,
        make=RedisServer,
        url=lambda port: f"redis://127.0.0.1:{port}/0",
    ),
}
PLACEHOLDERS: Mapping[str, str] = {kind.placeholder: name for name, kind in KINDS.items()}


def check(names: Sequence[object], used: frozenset[str], *, source: str) -> None:
    """Refuse (exit 3) an unknown or repeated service, and a placeholder whose service is not named."""
    seen: set[str] = set()
    for name in names:
        if name not in KINDS:
            raise SpecError(
                f"{source}: services: got {name!r}; the lab starts {', '.join(KINDS)} (PostgreSQL: use "
                "database: and {{database_url}})"
            )
        if name in seen:
            raise SpecError(f"{source}: services: {name!r} is named twice; name each service once")
        seen.add(str(name))
    for placeholder, name in PLACEHOLDERS.items():
        if placeholder in used and name not in seen:
            raise SpecError(
                f"{source}: {{{{{placeholder}}}}} is used, but services: does not name {name}; add "
                f"services: [{name}] (the lab starts it for the run)"
            )


@dataclass
class Services:
    """The services of one run: allocated (ports, directories), then started, then stopped."""

    names: tuple[str, ...] = ()
    ports: dict[str, int] = field(default_factory=dict)
    servers: dict[str, Server] = field(default_factory=dict)
    _root: Path | None = field(default=None, repr=False)
    _lease: Lease | None = field(default=None, repr=False)
    _book: LeaseBook | None = field(default=None, repr=False)

    @classmethod
    def allocate(cls, names: Sequence[str], ports: Callable[[], int]) -> Services:
        """A port of its own for each named service (`ports()` draws a free one), and a leased directory."""
        services = cls(tuple(names), _book=current_book())
        if not names:
            return services
        root = services._root = Path(tempfile.mkdtemp(prefix="acklab-services-"))
        root.chmod(0o755)
        services._lease = (services._book or current_book()).acquire("directory", str(root), path=str(root))
        for name in names:
            services.ports[name] = ports()
        return services

    @property
    def values(self) -> dict[str, str]:
        """The run placeholders the services fill (``redis_url``...)."""
        return {KINDS[name].placeholder: KINDS[name].url(self.ports[name]) for name in self.names}

    def start(self, *, clock: ShiftedClock | None = None, confined: Confined | None = None) -> None:
        """Start every service not running yet, on the run's shifted `clock` when there is one."""
        for name in self.names:
            server = self.servers.get(name)
            if server is None:
                server = self.servers[name] = self._make(name, clock, confined)
            if not server.running():
                server.start()

    def _make(self, name: str, clock: ShiftedClock | None, confined: Confined | None) -> Server:
        kind = KINDS[name]
        if self._root is None:
            raise HarnessError(f"services: {name} was started before it was allocated (Services.allocate)")
        if confined is not None:
            directory = confined.scratch / f"service-{name}"
            directory.mkdir(mode=0o700, exist_ok=True)
            owner = confined.scratch.stat()
            if os.geteuid() == 0:
                os.chown(directory, owner.st_uid, owner.st_gid)
        else:
            directory = self._root / name
            directory.mkdir(mode=0o700, exist_ok=True)
        logs = self._root / f"{name}-logs"
        logs.mkdir(exist_ok=True)
        return kind.make(
            self.ports[name],
            directory,
            logs,
            leases=self._book or current_book(),
            confined=confined,
            clock=clock,
        )

    def pids(self) -> list[int]:
        return [server.pid for server in self.servers.values() if server.pid is not None and server.running()]

    def clocks(self) -> dict[str, float | None]:
        """Each running service's own clock, where it can tell it (Redis: ``TIME``)."""
        found: dict[str, float | None] = {}
        for name, server in self.servers.items():
            found[name] = server.unix_time() if server.running() else None
        return found

    def log_bytes(self) -> bytes:
        return b"".join(
            f"--- acklab: services: {name} ---\n".encode() + server.log_tail(64 << 10).encode()
            for name, server in self.servers.items()
        )

    def stop_servers(self) -> None:
        """Stop every server; `start` makes them anew (a restart under another clock)."""
        for server in self.servers.values():
            server.stop()
        self.servers.clear()

    def stop(self) -> None:
        """Stop every server, remove the directories, release the lease (idempotent)."""
        self.stop_servers()
        if self._root is not None:
            shutil.rmtree(self._root, ignore_errors=True)
            self._root = None
        if self._lease is not None:
            (self._book or current_book()).release(self._lease)
            self._lease = None
