"""A job's life, read from the broker's own command stream (``MONITOR``), whatever library wrote it.

The lab follows every command the run's Redis executes and keeps those that write to a
``queues:`` key, grouped by client (a ``MULTI``, a Lua script: the script's own commands are
the calling client's). Who the client is comes from the machine, not from the library: the
worker whose process holds the socket the command came from (`owner`, `harness.procs.workers`),
or else the handler. Each group is one step:

* the handler (or any client that is not a worker) writes a queue key: ``enqueued``;
* a worker pushes to one (Celery restoring an unacknowledged job, Dramatiq requeueing a dead
  worker's): ``requeued``;
* a worker adds or moves an entry otherwise (Celery's ``unacked``, RQ's started registry,
  Dramatiq's acks, BullMQ's ``active``): ``taken`` (after ``requeued`` when one group does both);
* a worker only removes entries: ``acknowledged``.

Where the broker runs in a network namespace of its own (a consumer served confined, behind the
lab's bridge), the addresses it reports are not the machine's: no client is known as a worker,
and a group is told by its commands alone (a push ``enqueued``, an add or move ``taken``,
removals only ``acknowledged``), without a worker's name.

A blocking pop or move (``BRPOP``, ``BLMOVE``...) is left out: it is issued before there is
anything to take, and what it takes shows in the writes that follow. The stream is a
witness for the console and the proofs, never the count a verdict reads.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from acklab.evidence.documents.records import JobStepName
from acklab.harness.services.broker import matches
from acklab.harness.services.resp import Connection, RespError, text

PUSH = frozenset({"lpush", "rpush", "lpushx", "rpushx", "xadd"})
REMOVE = frozenset({"hdel", "srem", "zrem", "lrem", "xack", "del", "unlink", "zremrangebyscore", "ltrim"})
ADD = frozenset(
    {
        "hset",
        "hmset",
        "hsetnx",
        "sadd",
        "zadd",
        "lmove",
        "blmove",
        "rpoplpush",
        "brpoplpush",
        "smove",
        "xclaim",
        "xautoclaim",
        "xreadgroup",
        "lset",
        "linsert",
    }
)
STEPS: tuple[tuple[JobStepName, frozenset[str]], ...] = (("requeued", PUSH), ("taken", ADD))
UNNAMED_STEPS: tuple[tuple[JobStepName, frozenset[str]], ...] = (("enqueued", PUSH), ("taken", ADD))
GROUP_GAP_S = 0.005
FLUSH_S = 0.02
MAX_STEPS = 5_000  # steps kept per stream (the oldest are dropped beyond)


@dataclass(frozen=True)
class JobStep:
    """One step of a job's life as the broker saw it."""

    at_mono: float  # when the lab read it (time.monotonic)
    at_unix: float
    step: JobStepName  # enqueued | requeued | taken | acknowledged
    worker: str | None  # the worker's name, None: not a worker (the handler)
    keys: tuple[str, ...]
    commands: tuple[str, ...]


def parse(line: str) -> tuple[str, list[str]] | None:
    """(client, [command, args...]) of one ``MONITOR`` line; None for anything else."""
    # 1700000000.123456 [0 127.0.0.1:54321] "LPUSH" "celery" "..."
    head, sep, rest = line.partition("] ")
    if not sep or " [" not in head:
        return None
    client = head.split(" [", 1)[1].split(" ", 1)[-1]
    words, word, quoted, escaped = [], [], False, False
    for ch in rest:
        if escaped:
            word.append(ch)
            escaped = False
        elif ch == "\\" and quoted:
            escaped = True
            word.append(ch)
        elif ch == '"':
            quoted = not quoted
            if not quoted:
                words.append("".join(word))
                word = []
        elif quoted:
            word.append(ch)
    return (client, words) if words else None


class JobStream:
    """``MONITOR`` on the run's Redis in a thread of its own; the steps it saw, in order."""

    def __init__(
        self,
        port: int,
        keys: tuple[str, ...],
        owner: Callable[[int], str | None],
        *,
        knows_workers: bool = True,
    ) -> None:
        """`knows_workers` False: the clients' addresses are not the machine's (the broker runs in a
        network namespace of its own, behind the lab's bridge), so no client is known as a worker and
        each group is told by its commands alone."""
        self.port, self.keys, self._owner, self.knows_workers = port, keys, owner, knows_workers
        self._steps: list[JobStep] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._conn: Connection | None = None
        self._thread: threading.Thread | None = None
        self._own_port: int | None = None
        self._owners: dict[int, str | None] = {}
        self._group: list[tuple[float, str, list[str]]] = []
        self._caller = "lua"  # the client whose script runs (its commands show as "lua")

    def start(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            return
        self._stop.clear()
        ready = threading.Event()
        self._thread = threading.Thread(
            target=self._run, args=(ready,), name="acklab-job-stream", daemon=True
        )
        self._thread.start()
        ready.wait(2.0)

    def _connect(self) -> Connection | None:
        try:
            conn = Connection(self.port)
        except OSError:
            return None
        try:
            conn.command("MONITOR")
        except (OSError, ConnectionError, RespError):  # a broker going down or not up yet
            conn.close()
            return None
        conn.settimeout(FLUSH_S)  # a group with nothing after it is told within FLUSH_S
        self._own_port = conn.local_port
        return conn

    def _run(self, ready: threading.Event) -> None:
        while not self._stop.is_set():
            conn = self._conn = self._connect()
            ready.set()
            if conn is None:  # the broker is restarting: try again
                time.sleep(0.05)
                continue
            while not self._stop.is_set():
                try:
                    reply = conn.read()
                except TimeoutError:
                    self.flush()
                    continue
                except (OSError, ConnectionError):
                    break
                self.feed(text(reply), time.monotonic())
            conn.close()
        self.flush()

    def feed(self, line: str, now: float) -> None:
        """One ``MONITOR`` line, read at `now` (time.monotonic): it joins its client's group, or
        ends the group before it."""
        parsed = parse(line)
        if parsed is None:
            return
        client, words = parsed
        if client == "lua":  # a script's own command: its caller's
            client = self._caller
        else:
            self._caller = client
        group = self._group
        if group and (client != group[-1][1] or now - group[-1][0] > GROUP_GAP_S):
            self.flush()
        self._group.append((now, client, words))

    def flush(self) -> None:
        """Tell the group read so far as its steps."""
        group, self._group = self._group, []
        self._flush(group)

    def worker_of(self, client: str) -> str | None:
        """The worker whose process holds the connection at `client` (``host:port``), or None."""
        return self._who(client) if self.knows_workers else None

    def _who(self, client: str) -> str | None:
        port_text = client.rpartition(":")[2]
        if not port_text.isdigit():
            return None
        port = int(port_text)
        if self._owners.get(port) is None:  # only a worker is remembered: an unknown port is asked again
            self._owners[port] = self._owner(port)
        return self._owners[port]

    def _flush(self, group: list[tuple[float, str, list[str]]]) -> None:
        if not group:
            return
        client = group[0][1]
        if client.rpartition(":")[2] == str(self._own_port):
            return
        touched = [(w[0].lower(), k) for _, _, w in group for k in w[1:] if matches(k, self.keys)]
        writes = [(c, k) for c, k in touched if c in PUSH | ADD | REMOVE]
        if not writes:
            return
        worker = self._who(client) if self.knows_workers else None
        commands = {c for c, _ in writes}
        steps: list[JobStepName]
        if not self.knows_workers:
            steps = [name for name, kinds in UNNAMED_STEPS if commands & kinds]
            steps = steps or ["acknowledged"]
        elif worker is None:
            steps = ["enqueued"]
        else:
            # One group may requeue a dead worker's job and take it (Dramatiq's fetch does both), or
            # finish one job and take the next (BullMQ's moveToFinished): each step in its order.
            steps = [name for name, kinds in STEPS if commands & kinds]
            if not steps or (writes[0][0] in REMOVE and not commands & PUSH):
                steps.insert(0, "acknowledged")
        at_unix = time.time() - (time.monotonic() - group[0][0])
        keys = tuple(dict.fromkeys(k for _, k in writes))
        with self._lock:
            for step in steps:
                self._steps.append(JobStep(group[0][0], at_unix, step, worker, keys, tuple(sorted(commands))))
            del self._steps[:-MAX_STEPS]

    def since(self, mono: float) -> list[JobStep]:
        """The steps read at or after `mono` (time.monotonic)."""
        with self._lock:
            return [s for s in self._steps if s.at_mono >= mono]

    def forget_owners(self) -> None:
        """Resolve clients again (a worker restarted: its new connections come from new ports)."""
        self._owners.clear()

    def stop(self) -> None:
        self._stop.set()
        if self._conn is not None:
            with contextlib.suppress(OSError):
                self._conn.close()
        if self._thread is not None:
            self._thread.join(2.0)
            self._thread = None
