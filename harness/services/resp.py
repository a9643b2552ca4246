"""The Redis protocol (RESP2), as much of it as the lab speaks to the Redis it started.

The lab reads a queue's depth, the broker's error counts and its clients, restarts it, and
follows its command stream (``MONITOR``) to tell a job's life; it never needs a client
library for that, and the consumer's own library (redis-py, ioredis) stays the consumer's.
`Connection` sends one command and reads one reply; `Connection.stream` reads the replies
that keep coming (``MONITOR``). Replies are bounded: a bulk string or an array larger than
`MAX_REPLY_BYTES` / `MAX_ITEMS` is refused, the server being started by the lab but fed by
the code under test.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator
from typing import Any

from acklab.harness.errors import HarnessError

MAX_REPLY_BYTES = 8 << 20
MAX_ITEMS = 100_000
_MORE = object()  # the buffer does not hold a whole reply yet


class RespError(HarnessError):
    """The server answered with an error reply (``-OOM ...``, ``-ERR ...``), or spoke no RESP."""


def encode(*words: str | bytes | int) -> bytes:
    """One command as a RESP array of bulk strings."""
    out = [f"*{len(words)}\r\n".encode()]
    for word in words:
        raw = word if isinstance(word, bytes) else str(word).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(raw), raw))
    return b"".join(out)


def _parse(buf: bytes, at: int) -> tuple[Any, int]:
    """One reply from `buf` at `at`: (value, next position), or (_MORE, at) when incomplete."""
    end = buf.find(b"\r\n", at)
    if end < 0:
        return _MORE, at
    kind, line = buf[at : at + 1], buf[at + 1 : end]
    after = end + 2
    if kind == b"+":
        return line.decode(errors="replace"), after
    if kind == b"-":
        return RespError(line.decode(errors="replace")), after
    if kind == b":":
        return int(line), after
    if kind == b"$":
        return _bulk(buf, at, after, int(line))
    if kind == b"*":
        return _array(buf, at, after, int(line))
    raise RespError(f"not a RESP reply: {buf[at : at + 40]!r}")


def _bulk(buf: bytes, at: int, after: int, size: int) -> tuple[Any, int]:
    """A bulk string of `size` bytes starting at `after` (its header at `at`)."""
    if size < 0:
        return None, after
    if size > MAX_REPLY_BYTES:
        raise RespError(f"a bulk reply of {size} bytes (the lab reads at most {MAX_REPLY_BYTES})")
    if len(buf) < after + size + 2:
        return _MORE, at
    return buf[after : after + size], after + size + 2


def _array(buf: bytes, at: int, after: int, count: int) -> tuple[Any, int]:
    """An array of `count` replies starting at `after` (its header at `at`)."""
    if count < 0:
        return None, after
    if count > MAX_ITEMS:
        raise RespError(f"an array of {count} items (the lab reads at most {MAX_ITEMS})")
    items: list[Any] = []
    for _ in range(count):
        item, after = _parse(buf, after)
        if item is _MORE:
            return _MORE, at
        items.append(item)
    return items, after


class Connection:
    """One connection to a Redis server on loopback."""

    def __init__(self, port: int, *, timeout_s: float = 2.0, host: str = "127.0.0.1") -> None:
        self._sock = socket.create_connection((host, port), timeout=timeout_s)
        self._buf = b""

    @property
    def local_port(self) -> int:
        """The port this connection comes from (how the server's client list names it)."""
        return int(self._sock.getsockname()[1])

    def settimeout(self, timeout_s: float | None) -> None:
        self._sock.settimeout(timeout_s)

    def read(self) -> Any:
        """The next reply; an error reply is returned as a `RespError`, not raised."""
        while True:
            value, used = _parse(self._buf, 0)
            if value is not _MORE:
                self._buf = self._buf[used:]
                return value
            if len(self._buf) > MAX_REPLY_BYTES + 64:
                raise RespError(f"a reply longer than {MAX_REPLY_BYTES} bytes")
            chunk = self._sock.recv(65536)
            if not chunk:
                raise ConnectionError("the server closed the connection")
            self._buf += chunk

    def command(self, *words: str | bytes | int) -> Any:
        """Send one command and return its reply; RespError for an error reply."""
        self._sock.sendall(encode(*words))
        reply = self.read()
        if isinstance(reply, RespError):
            raise reply
        return reply

    def stream(self) -> Iterator[Any]:
        """Replies as they come (after ``MONITOR``), until the connection closes."""
        while True:
            try:
                yield self.read()
            except (ConnectionError, OSError):
                return

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._sock.close()

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def text(value: Any) -> str:
    """A reply as text (bulk strings are bytes)."""
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def info(port: int, section: str) -> dict[str, str]:
    """``INFO section`` as a mapping (``errorstat_OOM`` -> ``count=1``...)."""
    with Connection(port) as conn:
        reply = text(conn.command("INFO", section))
    found = {}
    for line in reply.splitlines():
        if ":" in line and not line.startswith("#"):
            key, _, value = line.partition(":")
            found[key] = value
    return found
