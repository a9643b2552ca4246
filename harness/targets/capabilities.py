"""What a served target can do beyond taking deliveries: experiments ask for a capability, never
for a kind of target.

* ``process``: the handler runs in a process the lab may kill, start and wait on — ``killable``
  (a target spec's ``command:``: the lab sees only its answers and its effects) or ``hooked``
  (the built-in fixture: it also crashes itself after its commit on request, and works inside
  its transaction for as long as the lab asks, so a kill can be aimed there);
* ``db_link``: the handler's connection to its database is a TCP link the lab can route through
  a fault proxy (the fixture on a PostgreSQL ``--db``);
* ``clock``: the lab can run the consumer (and its ``services:``) on a clock it moves (a target
  spec with ``command:``, under libfaketime: `harness.targets.fleet`);
* ``restart``: the lab can stop and start the whole consumer as a deploy does (``command:``);
* ``replicas``: how many processes of the consumer the lab runs behind its balancer
  (``topology.replicas``; 1 for every other target).

A target says which it has, and why it lacks the others (`Missing`): an experiment that needs an
absent one is listed with the experiment's own words and that reason — skipped, or refused when
named (docs/experiments.md). Asking for one (`Needs.process`, `Needs.db_link`) makes the target
serve it: the served `Endpoint` then carries the process (`ProcessControl`, or `HookedProcess`)
or the link (`DbLink`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol

if TYPE_CHECKING:
    from acklab.harness.netfaults import ProxyThread

ProcessKind = Literal["killable", "hooked"]
NO_CLOCK = (
    "the lab shifts the clock only of a consumer it starts: a target spec with command: (the built-in "
    "fixture and an app served in this process run on the lab's own clock)"
)
NO_RESTART = (
    "the lab restarts only a consumer it starts: a target spec with command: (argv that serves it), so a "
    "deploy can stop and start it between deliveries"
)


@dataclass(frozen=True)
class Missing:
    """A capability a target does not offer, and why (in words a user can act on)."""

    why: str


@dataclass(frozen=True)
class Capabilities:
    """What a target can do beyond taking deliveries (see the module docstring)."""

    process: ProcessKind | Missing
    db_link: Literal["tcp"] | Missing
    clock: Literal["shifted"] | Missing = Missing(NO_CLOCK)
    restart: Literal["deploy"] | Missing = Missing(NO_RESTART)
    replicas: int = 1

    def lacks_process(self, *, hooked: bool = False) -> str | None:
        """Why there is no process (or, with `hooked`, no hooked one) to strike; None: there is."""
        if isinstance(self.process, Missing):
            return self.process.why
        if hooked and self.process != "hooked":
            return "its process runs code the lab cannot hook (a service of command:)"
        return None

    def lacks_db_link(self) -> str | None:
        """Why there is no database link to put faults on; None: there is."""
        return self.db_link.why if isinstance(self.db_link, Missing) else None

    def lacks_clock(self) -> str | None:
        """Why the consumer's clock cannot be moved; None: it can."""
        return self.clock.why if isinstance(self.clock, Missing) else None

    def lacks_restart(self) -> str | None:
        """Why the consumer cannot be restarted as a deploy does; None: it can."""
        return self.restart.why if isinstance(self.restart, Missing) else None


class ProcessControl(Protocol):
    """The handler's process (or its replicas): killed with its whole group, started again and
    waited for, ready."""

    down_reason: str | None  # why it is down and did not come back (None: it is not)

    @property
    def starts(self) -> int:
        """How often it was started."""

    def kill(self) -> int | None:
        """SIGKILL the process group; its exit code once it is gone (None: it was not running)."""

    def start(self) -> None:
        """Start it and wait until it is ready."""

    def running(self) -> bool: ...

    def state(self) -> tuple[bool, int]:
        """(ready, starts)."""


class HookedProcess(ProcessControl, Protocol):
    """A process whose handler takes the lab's hooks (the built-in fixture)."""

    database_url: str  # the database it writes: a transaction open there is seen from outside

    def start(self, *, crash_after_commit: bool = False, processing_delay_ms: int = 0) -> None:
        """Start it (crashing itself after each commit, or working inside each transaction)."""

    def wait_exit(self, timeout_s: float) -> int | None:
        """Its exit code once it exits by itself (None: still running after `timeout_s`)."""


@dataclass(frozen=True)
class DbLink:
    """The handler's database link routed through a fault proxy, and the real database behind it."""

    proxy: ProxyThread
    database_url: str
