"""The sockets of a synchronised burst: opened ahead, Nagle off, and flushed before the release.

A burst sender (`harness.wire.burst_h1`, `harness.wire.burst_h2`) writes every request but its last
byte, then waits here until the *peer's kernel* has acknowledged every byte written — not
just until asyncio's buffer is empty: on Linux the socket's send queue (``TIOCOUTQ``, the
bytes not yet acknowledged) must read 0. Only then are the last bytes released, so the
release is the one thing left on the wire. TCP_NODELAY sends each of them at once, as a
packet of its own.
"""

from __future__ import annotations

import array
import asyncio
import contextlib
import fcntl
import socket
import ssl
import struct
import sys
import termios
import time
from collections.abc import Sequence
from urllib.parse import urlsplit

import httpx

FLUSH_POLL_S = 0.0005
READ_POLL_S = 0.001
# After the peer read the partial requests (or stopped reading them), the server's event loop
# still has to take them in: a short pause, so that the release does not race its own reading.
SETTLE_S = 0.005
# Linux: every TCP socket of this network namespace and its queues (a peer on this machine).
_TCP_TABLES = (("/proc/net/tcp", socket.AF_INET), ("/proc/net/tcp6", socket.AF_INET6))
_LISTEN = "0A"  # a socket's state in /proc/net/tcp: TCP_LISTEN
# The accept queue of the standard library's socketserver (request_queue_size), the shortest a
# web server is likely to listen with; the kernel takes one more connection than the backlog.
SHORT_BACKLOG = 5
# Linux: the bytes of a TCP socket still in its send queue (sent but unacknowledged, or unsent).
_OUTQ = getattr(termios, "TIOCOUTQ", None) if sys.platform.startswith("linux") else None


def ssl_context(alpn: str) -> ssl.SSLContext:
    """What httpx's own transport would use (certifi, SSL_CERT_FILE…), offering only `alpn`."""
    context = httpx.create_ssl_context()
    context.set_alpn_protocols([alpn])
    return context


async def open_stream(
    url: httpx.URL, *, alpn: str, timeout_s: float
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection to `url`'s host (TLS for https, offering `alpn`), with TCP_NODELAY set."""
    parts = urlsplit(str(url))
    host = parts.hostname or "127.0.0.1"
    port = parts.port or (443 if parts.scheme == "https" else 80)
    tls = ssl_context(alpn) if parts.scheme == "https" else None
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(host, port, ssl=tls, server_hostname=host if tls else None),
            timeout_s,
        )
    except TimeoutError as exc:
        raise httpx.ConnectTimeout(f"connecting to {host}:{port} took more than {timeout_s:g} s") from exc
    except (OSError, ssl.SSLError) as exc:
        raise httpx.ConnectError(f"could not connect to {host}:{port}: {exc}") from exc
    raw = writer.get_extra_info("socket")
    if raw is not None:
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return reader, writer


def unacknowledged(writer: asyncio.StreamWriter) -> int:
    """Bytes written to `writer` that the peer has not acknowledged yet (asyncio's buffer too)."""
    pending = writer.transport.get_write_buffer_size()
    raw = writer.get_extra_info("socket")
    if _OUTQ is None or raw is None or writer.transport.is_closing():
        return pending
    queued = array.array("i", [0])
    try:
        fcntl.ioctl(raw.fileno(), _OUTQ, queued, True)
    except OSError:
        return pending
    return pending + queued[0]


async def wait_flushed(writers: Sequence[asyncio.StreamWriter], timeout_s: float) -> bool:
    """Until every byte written to `writers` was acknowledged by the peer; False after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while any(unacknowledged(w) for w in writers):
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(FLUSH_POLL_S)
    return True


def proc_address(host: str, port: int, family: int) -> str:
    """`host`:`port` as /proc/net/tcp(6) spells a socket's address (each 32-bit word in the
    machine's own byte order, in hex)."""
    packed = socket.inet_pton(family, host)
    words = struct.unpack(f"={len(packed) // 4}I", packed)
    return "".join(f"{w:08X}" for w in words) + f":{port:04X}"


def peer_unread(writers: Sequence[asyncio.StreamWriter]) -> dict[int, int]:
    """For each writer (by position) whose peer socket is on this machine, in this network
    namespace (a served fixture, a sandbox's bridge), the bytes that peer holds unread: its
    receive queue, read from /proc/net/tcp(6). A peer elsewhere is not in it."""
    wanted: dict[tuple[int, str, str], int] = {}
    for k, writer in enumerate(writers):
        raw = writer.get_extra_info("socket")
        if raw is None or raw.family not in (socket.AF_INET, socket.AF_INET6):
            continue
        with contextlib.suppress(OSError, ValueError):
            ours, theirs = raw.getsockname(), raw.getpeername()
            key = (
                raw.family,
                proc_address(theirs[0], theirs[1], raw.family),
                proc_address(ours[0], ours[1], raw.family),
            )
            wanted[key] = k
    found: dict[int, int] = {}
    for table, family in _TCP_TABLES:
        if not any(key[0] == family for key in wanted):
            continue
        try:
            with open(table, encoding="ascii") as rows:
                lines = rows.read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 4 and (key := (family, fields[1], fields[2])) in wanted:
                found[wanted[key]] = int(fields[4].partition(":")[2], 16)
    return found


async def wait_read(
    writers: Sequence[asyncio.StreamWriter], timeout_s: float, settle_s: float = SETTLE_S
) -> None:
    """Until the peers on this machine have read what `writers` wrote, or read nothing more for
    `settle_s` (a server that takes connections one at a time, a busy one); then `settle_s` more.

    Acknowledged is not read: a sandboxed service is reached through the lab's bridge, whose
    socket the kernel acknowledges for at once, and which hands each connection in and relays it
    in its own time; a loaded server reads late too. Released before, the last bytes catch up
    with the first ones in the same queue, and the burst arrives as spread as its setup was."""
    deadline = time.monotonic() + timeout_s
    last: dict[int, int] | None = None
    still = time.monotonic()
    while (unread := {k: n for k, n in peer_unread(writers).items() if n}) and time.monotonic() < deadline:
        if unread != last:
            last, still = unread, time.monotonic()
        elif time.monotonic() - still >= settle_s:
            break
        await asyncio.sleep(READ_POLL_S)
    await asyncio.sleep(settle_s)


def accept_queue(port: int) -> int | None:
    """How many connections wait to be accepted by the sockets listening on `port` on this machine
    (in this network namespace: /proc/net/tcp(6) gives a listening socket's accept queue as its
    rx_queue); None when none listens here."""
    queued: int | None = None
    for table, _family in _TCP_TABLES:
        try:
            with open(table, encoding="ascii") as rows:
                lines = rows.read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 4 and fields[3] == _LISTEN and fields[1].endswith(f":{port:04X}"):
                queued = (queued or 0) + int(fields[4].partition(":")[2], 16)
    return queued


async def wait_for_room(port: int, wanted: int, deadline: float, settle_s: float = SETTLE_S) -> None:
    """Until the listener on `port` can take `wanted` more connections into an accept queue as short
    as the standard library's (`SHORT_BACKLOG`), accepts none for `settle_s` (a server that takes
    them one at a time, or a busy one: its queue is its own), or `deadline`; at once when it does
    not listen on this machine."""
    last: int | None = None
    still = time.monotonic()
    while (queued := accept_queue(port)) is not None and queued + wanted > SHORT_BACKLOG + 1:
        now = time.monotonic()
        if now >= deadline:
            return
        if queued != last:
            last, still = queued, now
        elif now - still >= settle_s:
            return
        await asyncio.sleep(READ_POLL_S)


async def close_quietly(writer: asyncio.StreamWriter) -> None:
    """Close a connection; a peer that already went away is no error here."""
    writer.close()
    with contextlib.suppress(OSError, TimeoutError, ssl.SSLError):
        await asyncio.wait_for(writer.wait_closed(), 1.0)
