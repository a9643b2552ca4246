"""The Redis the lab started, seen as a consumer's queue broker (``queues:``, docs/queues.md).

What the queue experiments ask of the broker, all through the protocol, none of it knowing
which library put the jobs there:

* `Broker.depth`: the jobs the ``queues:`` keys hold — a list's length, a hash's fields
  (Celery's ``unacked``), a set's or sorted set's members, a stream's entries; a key may be a
  glob (``dramatiq:__acks__.*``). Zero over the settle window is a drained queue.
* `Broker.refuse_writes` / `accept_writes`: the broker refuses every write that would use
  memory (``maxmemory 1``, ``noeviction``: ``-OOM command not allowed``), as a full or failing
  broker does, while reads and blocking pops go on; `Broker.refused` counts the refusals per
  command (``INFO commandstats`` ``rejected_calls``) — the proof that an enqueue was refused.
* `Broker.unblock_all`: every client blocked in a pop (``BRPOP``...) is answered "nothing"
  (``CLIENT UNBLOCK``), so that a worker the lab froze holds no pending pop that would take
  a job into its socket while it cannot work.
* `Broker.popped`: the clients whose last command was a blocking pop that has returned, and
  that have sent nothing since: a job such a client took is in its hands and in no key yet
  (Celery records it in ``unacked`` only once its worker reads the answer; a plain ``BRPOP``
  loop records it nowhere while it works).
* `Broker.run_id`: the server's identity, which a restart changes.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from acklab.harness.services.resp import Connection, RespError, info, text

SIZE_OF = {"list": "LLEN", "hash": "HLEN", "set": "SCARD", "zset": "ZCARD", "stream": "XLEN"}
SCAN_COUNT = 500
MAX_KEYS = 10_000  # keys one glob may match before the lab stops counting
CELERY_RESTORE_LOCK = "unacked_mutex"  # kombu's Redis transport (unacked_mutex_key)
# The pops that wait for an entry and hand it to the client alone (a move into another key is
# among them: until the client speaks again, the lab cannot tell it from a pop).
BLOCKING_POPS = frozenset(
    {"blpop", "brpop", "blmpop", "blmove", "brpoplpush", "bzpopmin", "bzpopmax", "bzmpop"}
)


def is_glob(pattern: str) -> bool:
    return any(c in pattern for c in "*?[")


def matches(key: str, patterns: Iterable[str]) -> bool:
    return any(fnmatch.fnmatchcase(key, p) if is_glob(p) else key == p for p in patterns)


@dataclass(frozen=True)
class Broker:
    """The run's Redis on `port`, as the queue of a consumer whose jobs live under `keys`."""

    port: int
    keys: tuple[str, ...]

    def connect(self) -> Connection:
        return Connection(self.port)

    def _expand(self, conn: Connection) -> list[str]:
        found: list[str] = []
        for pattern in self.keys:
            if not is_glob(pattern):
                found.append(pattern)
                continue
            cursor = "0"
            while True:
                cursor_raw, batch = conn.command("SCAN", cursor, "MATCH", pattern, "COUNT", SCAN_COUNT)
                found.extend(text(k) for k in batch)
                cursor = text(cursor_raw)
                if cursor == "0" or len(found) > MAX_KEYS:
                    break
        return list(dict.fromkeys(found))

    def depths(self) -> dict[str, int]:
        """Jobs per existing key of ``queues:`` (a key that does not exist holds none)."""
        with self.connect() as conn:
            held: dict[str, int] = {}
            for key in self._expand(conn):
                kind = text(conn.command("TYPE", key))
                if kind == "none":
                    continue
                size = SIZE_OF.get(kind)
                held[key] = int(conn.command(size, key)) if size is not None else 1
            return held

    def depth(self) -> int:
        return sum(self.depths().values())

    def restore_lock_s(self) -> float | None:
        """Seconds left on Celery's restore lock (kombu's ``unacked_mutex`` key), None when it is
        not held: a worker killed while restoring jobs past their visibility timeout leaves it
        held, and no other worker restores any until it expires."""
        with self.connect() as conn:
            left = int(conn.command("PTTL", CELERY_RESTORE_LOCK))
        return left / 1000 if left > 0 else None

    def run_id(self) -> str:
        return info(self.port, "server").get("run_id", "")

    def refuse_writes(self) -> None:
        with self.connect() as conn:
            conn.command("CONFIG", "SET", "maxmemory-policy", "noeviction")
            conn.command("CONFIG", "SET", "maxmemory", "1")

    def accept_writes(self) -> None:
        with self.connect() as conn:
            conn.command("CONFIG", "SET", "maxmemory", "0")

    def refused(self) -> dict[str, int]:
        """Calls the broker rejected so far, per command (``lpush`` -> 1)."""
        found: dict[str, int] = {}
        for key, value in info(self.port, "commandstats").items():
            fields = dict(part.partition("=")[::2] for part in value.split(","))
            rejected = int(fields.get("rejected_calls", "0") or 0)
            if rejected:
                found[key.removeprefix("cmdstat_")] = rejected
        return found

    def clients(self) -> list[dict[str, str]]:
        """``CLIENT LIST``: one mapping per connection (``id``, ``addr``, ``flags``, ``cmd``...)."""
        with self.connect() as conn:
            return _client_list(text(conn.command("CLIENT", "LIST")))

    def popped(self) -> list[str]:
        """The addresses (``host:port``) of the clients that a blocking pop answered and that have
        sent nothing since: each may hold what it took, outside every key."""
        return [
            c.get("addr", "")
            for c in self.clients()
            if c.get("cmd") in BLOCKING_POPS and "b" not in c.get("flags", "")
        ]

    def unblock_all(self) -> int:
        """Answer every client blocked in a pop with "nothing"; how many were."""
        with self.connect() as conn:
            listing = _client_list(text(conn.command("CLIENT", "LIST")))
            blocked = [c["id"] for c in listing if "b" in c.get("flags", "") and "id" in c]
            for client in blocked:
                try:
                    conn.command("CLIENT", "UNBLOCK", client)
                except RespError:
                    continue
        return len(blocked)


def _client_list(listing: str) -> list[dict[str, str]]:
    return [
        dict(part.partition("=")[::2] for part in line.split(" ")) for line in listing.splitlines() if line
    ]


def newly_refused(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    """The refusals in `after` that `before` did not count."""
    return {k: n - before.get(k, 0) for k, n in after.items() if n > before.get(k, 0)}


def describe(depths: dict[str, int], keys: Sequence[str]) -> str:
    held = ", ".join(f"{k}: {n}" for k, n in depths.items() if n)
    return held or f"none of {', '.join(keys)}"
