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
  (``topology.replicas``; 1 for every other target);
* ``queue``: the consumer's jobs go through the lab's broker to workers the lab starts
  (``workers:``, ``queues:``, ``services: [redis]``: `harness.targets.queues`): how many, and
  whether the broker can tell them apart;
* ``provider_api``: whose API the lab serves the consumer (``effects.provider_api``: ``stripe``);
* ``sinks``: the sinks the target runs, by name (``effects.<name>``: ``smtp``, ``outbound``,
  ``provider_api``), known before they start; what each can do is the sinks registry's to say
  (`harness.sinks.SINKS`: which one can stall an effect, say).

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
NO_QUEUE = (
    "the lab breaks only a queue it can see: a target spec with workers: (the commands that take the jobs), "
    "queues: (the Redis keys that hold them) and services: [redis]"
)
NO_TAKER = (
    "the lab cannot tell which worker took the job: the broker runs in a network namespace of its own (a "
    "consumer served confined, behind the lab's bridge), where its clients' addresses are not the machine's"
)
NO_PROVIDER_API = (
    "the target has no effects.provider_api: add effects: {provider_api: {provider: stripe}} and point the "
    "consumer's API base at {{provider_api_url}}"
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
class Queue:
    """The consumer's queue: `workers` worker processes the lab starts, and whether the broker can tell
    them apart (`named`; False behind a bridge, where every worker's connection comes from one address)."""

    workers: int
    named: bool = True


@dataclass(frozen=True)
class Capabilities:
    """What a target can do beyond taking deliveries (see the module docstring)."""

    process: ProcessKind | Missing
    db_link: Literal["tcp"] | Missing
    clock: Literal["shifted"] | Missing = Missing(NO_CLOCK)
    restart: Literal["deploy"] | Missing = Missing(NO_RESTART)
    replicas: int = 1
    queue: Queue | Missing = Missing(NO_QUEUE)
    provider_api: str | Missing = Missing(NO_PROVIDER_API)
    sinks: tuple[str, ...] = ()  # by name, in the registry's order

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

    def lacks_queue(self, *, workers: int = 1, named: bool = False) -> str | None:
        """Why there is no queue with at least `workers` workers (with `named`, told apart by the
        broker) to strike; None: there is."""
        queue = self.queue
        if isinstance(queue, Missing):
            return queue.why
        if queue.workers < workers:
            return (
                f"at least {workers} worker processes are needed (workers: count), so that another one can take "
                f"the job; the consumer has {queue.workers}"
            )
        return NO_TAKER if named and not queue.named else None

    def lacks_provider_api(self, provider: str | None = None) -> str | None:
        """Why the lab serves no provider's API (with `provider`, not that provider's); None: it does."""
        if isinstance(self.provider_api, Missing):
            return self.provider_api.why
        if provider is not None and self.provider_api != provider:
            return f"the lab serves {self.provider_api}'s API to this target, not {provider}'s"
        return None


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
