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
import sys
import termios
import time
from collections.abc import Sequence
from urllib.parse import urlsplit

import httpx

FLUSH_POLL_S = 0.0005
# After the kernel acknowledged the partial requests, the server's event loop still has to
# read them: a short pause, so that the release does not race the server's own reading.
SETTLE_S = 0.005
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


async def close_quietly(writer: asyncio.StreamWriter) -> None:
    """Close a connection; a peer that already went away is no error here."""
    writer.close()
    with contextlib.suppress(OSError, TimeoutError, ssl.SSLError):
        await asyncio.wait_for(writer.wait_closed(), 1.0)
