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
# sock_diag (linux/sock_diag.h, linux/inet_diag.h, linux/netlink.h): listening sockets and their queues.
_NETLINK_SOCK_DIAG, _SOCK_DIAG_BY_FAMILY, _TCP_LISTEN = 4, 20, 10
_DUMP = 0x1 | 0x300  # NLM_F_REQUEST | NLM_F_DUMP
_NLMSG_ERROR, _NLMSG_DONE = 2, 3
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
    # Each poll reads /proc/net/tcp (milliseconds on a big machine). Looking the peers up in
    # sock_diag netlink instead (0.1 ms a poll) was tried and left out: no figure improved, and
    # detection in SQLite's 0 ms window read lower back to back (worst of 5 rounds: 60 and 75 %
    # against 70 and 90 %), within that figure's noise (a 12 ms settle: 85 and 80 % either way).
    while (unread := {k: n for k, n in peer_unread(writers).items() if n}) and time.monotonic() < deadline:
        if unread != last:
            last, still = unread, time.monotonic()
        elif time.monotonic() - still >= settle_s:
            break
        await asyncio.sleep(READ_POLL_S)
    await asyncio.sleep(settle_s)


def listening(port: int) -> list[tuple[int, int]] | None:
    """Each socket listening on `port` on this machine (in this network namespace), as (connections
    waiting to be accepted, backlog); None when the kernel will not say (no sock_diag netlink).

    Asked of the kernel's sock_diag netlink for listening TCP sockets only (a fraction of a
    millisecond; /proc/net/tcp lists every socket, and took 16 ms a read on a busy machine)."""
    found: list[tuple[int, int]] = []
    try:
        with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, _NETLINK_SOCK_DIAG) as link:
            link.settimeout(1.0)
            for family in (socket.AF_INET, socket.AF_INET6):
                # inet_diag_req_v2: family, protocol, ext, pad, states; then inet_diag_sockid (48 bytes)
                ask = struct.pack("=BBBBI", family, socket.IPPROTO_TCP, 0, 0, 1 << _TCP_LISTEN)
                ask += struct.pack("!HH", port, 0) + bytes(44)
                link.send(struct.pack("=IHHII", 16 + len(ask), _SOCK_DIAG_BY_FAMILY, _DUMP, 1, 0) + ask)
                found += _listeners_answered(link, port)
    except OSError:
        return None
    return found


def _listeners_answered(link: socket.socket, port: int) -> list[tuple[int, int]]:
    """The (queued, backlog) of each inet_diag_msg for `port` until the dump is done."""
    found: list[tuple[int, int]] = []
    while True:
        data = link.recv(65536)
        if not data:
            raise OSError("sock_diag ended the dump without saying it was done")
        at = 0
        while at + 16 <= len(data):
            length, kind = struct.unpack_from("=IH", data, at)
            if kind == _NLMSG_DONE:
                return found
            if kind == _NLMSG_ERROR or length < 16:
                raise OSError("sock_diag refused the request")
            body = data[at + 16 : at + length]
            # inet_diag_msg: family, state, timer, retrans, sockid (sport first), expires, rqueue, wqueue
            if len(body) >= 64 and struct.unpack_from("!H", body, 4)[0] == port:
                queued, backlog = struct.unpack_from("=II", body, 56)
                found.append((queued, backlog))
            at += (length + 3) & ~3


def accept_room(port: int) -> int | None:
    """How many more connections the listeners on `port` here take before the kernel drops
    handshakes (it queues one more than the backlog); None when none listens here, or it cannot tell."""
    found = listening(port)
    if not found:
        return None
    return sum(max(0, backlog + 1 - queued) for queued, backlog in found)


async def wait_for_room(port: int, wanted: int, deadline: float, settle_s: float = SETTLE_S) -> None:
    """Until the listeners on `port` can take `wanted` more connections, accept none for `settle_s`
    (a server that takes them one at a time, or a busy one: its queue is its own), or `deadline`;
    at once when none listens on this machine."""
    last: int | None = None
    still = time.monotonic()
    while (room := accept_room(port)) is not None and room < wanted:
        now = time.monotonic()
        if now >= deadline:
            return
        if room != last:
            last, still = room, now
        elif now - still >= settle_s:
            return
        await asyncio.sleep(READ_POLL_S)


async def close_quietly(writer: asyncio.StreamWriter) -> None:
    """Close a connection; a peer that already went away is no error here."""
    writer.close()
    with contextlib.suppress(OSError, TimeoutError, ssl.SSLError):
        await asyncio.wait_for(writer.wait_closed(), 1.0)
