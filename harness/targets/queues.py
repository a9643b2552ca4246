"""A consumer behind a queue: ``workers:`` and ``queues:`` of a target spec (docs/queues.md).

The handler verifies, enqueues and answers; workers do the effect later. Read in one place
(`Queueing.of`, from the spec document) and used by the spec targets at their moments: when
the run placeholders are filled (`bind`: each worker's command), when the consumer starts
(`start`: after the services, before ``command:``), when an experiment is served
(`control`: the endpoint's `QueueControl`), and at the end (`stop`, after the consumer).

``queues:`` names the Redis keys that hold the consumer's jobs — waiting, and taken but not
acknowledged (Celery's ``unacked``, RQ's started registry, Dramatiq's acks, BullMQ's
``active``): a count is read once they are all empty over the settle window and no worker
holds a job it popped (`QueueControl.held`), bounded by ``drained_within_s``. The form with options::

    queues: {keys: [celery, unacked], drained_within_s: 30, hold_s: 5}
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from dataclasses import dataclass, field
from pathlib import Path

from acklab.harness.errors import HarnessError, SpecError, TargetUnreachable
from acklab.harness.procs.clock import ShiftedClock
from acklab.harness.procs.confinement import Confined
from acklab.harness.procs.leases import current_book
from acklab.harness.procs.workers import WorkerCommand, WorkerPool, WorkerProcess
from acklab.harness.services import Services
from acklab.harness.services.broker import CELERY_RESTORE_LOCK, Broker, describe
from acklab.harness.services.job_stream import JobStep, JobStream
from acklab.harness.services.redis import RedisServer
from acklab.harness.services.resp import RespError
from acklab.harness.specs.credentials import resolve_env
from acklab.harness.specs.service import Queues, Worker
from acklab.harness.specs.target import TargetSpec
from acklab.harness.targets.capabilities import NO_QUEUE, Missing, Queue
from acklab.harness.targets.spec_checks import resolve_cwd

# What `QueueControl.held` calls the jobs workers popped and hold in no key yet.
IN_HAND = "(popped by a worker, in no key yet)"
DEFAULT_DRAINED_WITHIN_S = 30.0
DEFAULT_HOLD_S = 5.0
MAX_WORKERS = 16
NO_QUEUES = (
    "the consumer names no queue: add queues: (the Redis keys that hold its jobs, e.g. [celery, unacked]) and "
    "services: [redis], so the lab can see a job enqueued, taken and done"
)
NO_WORKERS = "the consumer has no workers: the lab starts them from workers: (argv, env, ready, count)"


def _options(spec: TargetSpec) -> Queues | None:
    """``queues:``, its list form read as the mapping with its waits' defaults."""
    queues = spec.queues
    if queues is None or isinstance(queues, Queues):
        return queues
    return Queues(keys=queues)


def check(spec: TargetSpec, *, source: str) -> None:
    """Refuse (exit 3) queues the lab could not watch, and more workers than it starts."""
    if _options(spec) is not None and "redis" not in spec.services:
        raise SpecError(
            f"{source}: queues: names Redis keys, but services: does not name redis; add services: [redis] "
            "(the lab starts it, watches the keys and fills {{redis_url}} for the handler and the workers)"
        )
    total = sum(w.count for w in spec.workers)
    if total > MAX_WORKERS:
        raise SpecError(f"{source}: workers: start {total} processes; the lab starts at most {MAX_WORKERS}")


def worker_command(worker: Worker, k: int, *, spec_dir: Path, workdir: Path | None) -> WorkerCommand:
    where = f"workers[{k}]"
    ready = worker.ready
    return WorkerCommand(
        argv=worker.argv,
        env={n: resolve_env(v, field_name=f"{where}.env.{n}") for n, v in worker.env.items()},
        cwd=resolve_cwd(worker.cwd, spec_dir=spec_dir, field_name=f"{where}.cwd")
        if worker.cwd is not None
        else workdir,
        count=worker.count,
        ready_log=ready.log,
        ready_url=resolve_env(ready.url, field_name=f"{where}.ready.url") if ready.url is not None else None,
        ready_status=ready.status or (),
        ready_timeout_s=worker.ready_timeout_s,
    )


@dataclass
class QueueControl:
    """What an experiment may do to a consumer behind a queue: read the queue, follow its jobs,
    kill, freeze and restart workers, restart the broker, make it refuse writes."""

    broker: Broker
    server: RedisServer
    workers: WorkerPool
    stream: JobStream
    drained_within_s: float = DEFAULT_DRAINED_WITHIN_S
    hold_s: float = DEFAULT_HOLD_S

    def depths(self) -> dict[str, int]:
        return self.broker.depths()

    def steps_since(self, mono: float) -> list[JobStep]:
        return self.stream.since(mono)

    @property
    def knows_workers(self) -> bool:
        """Whether the broker's clients can be told apart by worker (not when it runs behind a bridge)."""
        return self.stream.knows_workers

    def taker(self, since_mono: float) -> WorkerProcess | None:
        """The worker that took the job most recently (since `since_mono`), as the broker saw it."""
        taken = [s for s in self.stream.since(since_mono) if s.step == "taken" and s.worker]
        return self.workers.by_name(taken[-1].worker or "") if taken else None

    def held(self) -> dict[str, int]:
        """What the queue holds: the jobs in each ``queues:`` key, and the workers that took one with a
        blocking pop and have not spoken to the broker since (`IN_HAND`: Celery's worker between its
        ``BRPOP`` and its ``unacked`` write, a plain ``BRPOP`` loop while it works)."""
        held = self.broker.depths()
        hands = [a for a in self.broker.popped() if self.stream.worker_of(a) is not None]
        if hands:
            held[IN_HAND] = len(hands)
        return held

    async def wait_drained(self, step_s: float, reads: int = 3) -> str | None:
        """Wait until every ``queues:`` key is empty and no worker holds a job it popped, on `reads`
        reads in a row; None, or why it never was."""
        deadline = time.monotonic() + self.drained_within_s
        empty = 0
        held: dict[str, int] = {}
        while True:
            try:
                held = await asyncio.to_thread(self.held)
            except (OSError, ConnectionError, RespError) as exc:  # a broker restarting or loading: read again
                held = {"(broker unreachable)": 1}
                why = str(exc)
            else:
                why = ""
            empty = empty + 1 if not any(held.values()) else 0
            if empty >= reads:
                return None
            if time.monotonic() > deadline:
                return (
                    f"the queue never drained within queues.drained_within_s={self.drained_within_s:g} s "
                    f"(still held: {describe(held, self.broker.keys)}{'; ' + why if why else ''})"
                    + await asyncio.to_thread(self._restore_locked)
                )
            await asyncio.sleep(step_s)

    def _restore_locked(self) -> str:
        """Why a job past its visibility timeout may not have come back: Celery's restore lock held."""
        try:
            left = self.broker.restore_lock_s()
        except (OSError, ConnectionError, RespError):
            return ""
        if left is None:
            return ""
        return (
            f"; Celery's restore lock ({CELERY_RESTORE_LOCK}) is held for another {left:.0f} s: a worker "
            "killed while it restored jobs holds it, and no worker restores any until it expires "
            "(broker_transport_options.unacked_mutex_expire; docs/queues.md)"
        )

    def restart_broker(self) -> tuple[str, str]:
        """Restart the broker, what it held kept (`RedisServer.restart_persisted`); its run ids before and after."""
        before = self.broker.run_id()
        self.stream.forget_owners()
        self.server.restart_persisted()
        return before, self.broker.run_id()


@dataclass
class Queueing:
    """The workers and queues of one spec target."""

    workers: tuple[Worker, ...] = ()
    keys: tuple[str, ...] = ()
    drained_within_s: float = DEFAULT_DRAINED_WITHIN_S
    hold_s: float = DEFAULT_HOLD_S
    commands: tuple[WorkerCommand, ...] = ()
    pool: WorkerPool | None = field(default=None, repr=False)
    stream: JobStream | None = field(default=None, repr=False)
    _kept_log: bytes = field(default=b"", repr=False)

    @classmethod
    def of(cls, spec: TargetSpec) -> Queueing:
        options = _options(spec)
        if options is None:
            return cls(workers=spec.workers)
        return cls(
            workers=spec.workers,
            keys=options.keys,
            drained_within_s=options.drained_within_s,
            hold_s=options.hold_s,
        )

    @property
    def worker_count(self) -> int:
        return sum(w.count for w in self.workers)

    @property
    def active(self) -> bool:
        return bool(self.workers or self.keys)

    def bind(self, filled: TargetSpec, *, spec_dir: Path, workdir: Path | None) -> None:
        """Each worker's command, from the spec with its run placeholders filled."""
        self.commands = tuple(
            worker_command(w, k, spec_dir=spec_dir, workdir=workdir) for k, w in enumerate(filled.workers)
        )

    def start(
        self, services: Services | None, confined: Confined | None = None, *, reaches: tuple[int, ...] = ()
    ) -> None:
        """Start the workers (once; after the services, before the consumer) and follow the queue.
        Confined, a worker `reaches` what the service does (the services, the database, the sinks)."""
        if self.commands and self.pool is None:
            self.pool = WorkerPool(self.commands, leases=current_book(), confined=confined, reaches=reaches)
        if self.pool is not None:
            self.pool.start()
        if self.keys and self.stream is None and services is not None and "redis" in services.ports:
            server = services.servers.get("redis")
            # Confined, Redis runs behind the lab's bridge: its clients' addresses are its namespace's.
            confined_broker = isinstance(server, RedisServer) and server.confined is not None
            self.stream = JobStream(
                services.ports["redis"], self.keys, self._owner, knows_workers=not confined_broker
            )
            self.stream.start()

    def _owner(self, port: int) -> str | None:
        return self.pool.owner(port) if self.pool is not None else None

    def control(self, services: Services | None) -> QueueControl | None:
        """The experiments' handle on the queue (None: no workers or no queues to watch)."""
        if self.pool is None or self.stream is None or services is None:
            return None
        server = services.servers.get("redis")
        if not isinstance(server, RedisServer):
            return None
        return QueueControl(
            Broker(services.ports["redis"], self.keys),
            server,
            self.pool,
            self.stream,
            drained_within_s=self.drained_within_s,
            hold_s=self.hold_s,
        )

    def capability(self) -> Queue | Missing:
        """The queue the experiments strike, or why the consumer offers none."""
        if not self.active:
            return Missing(NO_QUEUE)
        if not self.keys:
            return Missing(NO_QUEUES)
        if not self.workers:
            return Missing(NO_WORKERS)
        return Queue(self.worker_count)

    def revive(self) -> None:
        """Start again, for the next experiment, a worker that exited on its own (its supervisor would);
        TargetUnreachable when it does not come back."""
        if self.pool is not None and not self.pool.running():
            try:
                self.pool.start()
            except HarnessError as exc:
                raise TargetUnreachable(f"a worker of workers: exited and did not come back: {exc}") from exc

    def use_clock(self, clock: ShiftedClock) -> None:
        """Run the workers on the consumer's shifted clock from now on (restarted under it, once)."""
        if self.pool is None:
            return
        self.pool.stop()
        for worker in self.pool.workers:
            worker.command = dataclasses.replace(worker.command, argv=clock.wrap(worker.command.argv))
        self.pool.start()

    def log_bytes(self) -> bytes:
        return self.pool.log_bytes() if self.pool is not None else self._kept_log

    def stop(self) -> None:
        """Stop following the queue, then the workers (before the services they use)."""
        if self.stream is not None:
            self.stream.stop()
            self.stream = None
        if self.pool is not None:
            self._kept_log = self.pool.close()
            self.pool = None
