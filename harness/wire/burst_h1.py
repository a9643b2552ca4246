"""Last-byte synchronisation over HTTP/1.1, on h11 (the state machine under httpx).

Each request of a burst gets a connection of its own, opened ahead, to its own URL's host: the
requests of one burst may differ (race-with-request releases a webhook and the app's own
request together), each is written as it is. h11 serialises the
request exactly as httpx's own transport does (httpcore hands h11 the same method, target,
header list and body), so the bytes on the wire are the transport's bytes. Every byte but
the last is written, acknowledged by the peer (`harness.wire.burst_socket.wait_flushed`) and read
by it where it runs on this machine (`wait_read`);
the release then writes the last bytes in one tight loop, one per connection, at real-time
priority where the OS allows it (`unpreempted`), so the server the first byte wakes cannot
run before the last is out. The server has every request but one byte in its buffers, so
what is left between the first and the last request reaching the handler is how fast the
server reads its connections.

The answer is parsed by the same h11 connection and handed back as an `httpx.Response`
whose body streams from the socket, so the lab reads it bounded, as any other answer.
A target that closes the connection before the last byte was released answered nothing:
the delivery ends in an error, and `closed_half_sent` says why.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import cast

import h11
import httpx

from acklab.harness.wire.burst_socket import (
    close_quietly,
    open_stream,
    wait_flushed,
    wait_for_room,
    wait_read,
)

READ_BYTES = 65536
# A burst's connections are opened a few at a time, each few once the listener's accept queue has
# room for them (`wait_for_room`: its backlog and queue, from the kernel). All sixteen at once
# overflowed the queue of a server that listens with a short backlog (the standard library's
# socketserver: 5): the kernel dropped the handshakes past it and the lab sent them again a second
# later, so arming a burst took 0.1 s or 1.2 s by luck. The release is unchanged.
CONNECTING_AT_ONCE = 4
# How long a listener may accept nothing before the next few go anyway (a server that takes its
# connections one at a time never makes room; a busy one has its own queue to keep).
ACCEPT_SETTLE_S = 0.005


def serialise(connection: h11.Connection, request: httpx.Request) -> bytes:
    """`request` as httpcore would write it through h11 (same header list, same body bytes)."""
    parts = [
        connection.send(
            h11.Request(method=request.method, target=request.url.raw_path, headers=request.headers.raw)
        )
    ]
    if request.content:
        parts.append(connection.send(h11.Data(data=request.content)))
    parts.append(connection.send(h11.EndOfMessage()))
    return b"".join(p for p in parts if p)


class H1Wire:
    """One request of a burst on a connection of its own, written but its last byte."""

    def __init__(self, request: httpx.Request) -> None:
        self.url = request.url
        self._h11 = h11.Connection(h11.CLIENT)
        payload = serialise(self._h11, request)
        self.head, self.last = payload[:-1], payload[-1:]
        self.sent = asyncio.Event()
        self.claimed = asyncio.Event()  # the lab's transport is waiting for this answer
        self.released_mono: float | None = None
        self.closed_half_sent = False
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._failure: httpx.TransportError | None = None

    @property
    def port(self) -> int:
        return self.url.port or (443 if self.url.scheme == "https" else 80)

    @property
    def writer(self) -> asyncio.StreamWriter | None:
        return self._writer if self._failure is None else None

    async def connect(self, timeout_s: float) -> None:
        """Open the connection to the request's host and write the request but its last byte (a
        failure is kept, not raised)."""
        try:
            self._reader, self._writer = await open_stream(self.url, alpn="http/1.1", timeout_s=timeout_s)
        except httpx.TransportError as exc:
            self._failure = exc
            return
        self._writer.write(self.head)

    def release(self) -> None:
        """Write the last byte (synchronous: the burst releases every wire in one loop)."""
        if self._reader is None or self._writer is None or self._failure is not None:
            return
        if self._reader.at_eof() or self._writer.transport.is_closing():
            self.closed_half_sent = True
            return
        # Read before the write: a server woken by it may run before this task does again, and
        # whatever the handler says happened after its release must not read as before it.
        self.released_mono = time.monotonic()
        # asyncio's transport sends at once when nothing is buffered (wait_flushed saw to that).
        self._writer.write(self.last)

    def _closed(self) -> httpx.RemoteProtocolError:
        if self.released_mono is None:
            self.closed_half_sent = True
            return httpx.RemoteProtocolError(
                f"the target closed the connection while the request was half-sent ({len(self.head)} of "
                f"{len(self.head) + 1} bytes written; the last byte is held back until the burst's "
                "release): it answered nothing"
            )
        return httpx.RemoteProtocolError("the target closed the connection without sending a response")

    async def _next_event(self, timeout_s: float) -> h11.Event | type[h11.PAUSED]:
        while True:
            try:
                event = self._h11.next_event()
            except h11.RemoteProtocolError as exc:
                raise httpx.RemoteProtocolError(f"the target's answer is not valid HTTP/1.1: {exc}") from exc
            if event is not h11.NEED_DATA:
                return cast(h11.Event | type[h11.PAUSED], event)
            if self._reader is None:
                raise self._failure or httpx.ReadError("the connection was never opened")
            try:
                data = await asyncio.wait_for(self._reader.read(READ_BYTES), timeout_s)
            except TimeoutError as exc:
                raise httpx.ReadTimeout(f"no answer within {timeout_s:g} s") from exc
            except OSError as exc:
                raise httpx.ReadError(f"{type(exc).__name__}: {exc}") from exc
            if not data and self._h11.their_state is h11.SEND_RESPONSE:
                raise self._closed()
            try:
                self._h11.receive_data(data)
            except h11.RemoteProtocolError as exc:
                raise httpx.RemoteProtocolError(f"the target's answer is not valid HTTP/1.1: {exc}") from exc

    async def response(self, request: httpx.Request, timeout_s: float) -> httpx.Response:
        self.claimed.set()
        try:
            return await self._response(request, timeout_s)
        except BaseException:
            await self.aclose()  # no answer to read: the connection is done
            raise

    async def _response(self, request: httpx.Request, timeout_s: float) -> httpx.Response:
        if self._failure is not None:
            raise self._failure
        while True:
            event = await self._next_event(timeout_s)
            if isinstance(event, h11.InformationalResponse):
                continue
            if isinstance(event, h11.Response):
                return httpx.Response(
                    event.status_code,
                    headers=event.headers.raw_items(),
                    stream=_Body(self, timeout_s),
                    request=request,
                    extensions={
                        "http_version": b"HTTP/" + event.http_version,
                        "reason_phrase": event.reason,
                    },
                )
            if isinstance(event, h11.ConnectionClosed):
                raise self._closed()
            raise httpx.RemoteProtocolError(f"unexpected {type(event).__name__} before the response")

    async def body(self, timeout_s: float) -> AsyncIterator[bytes]:
        while True:
            event = await self._next_event(timeout_s)
            if isinstance(event, h11.Data):
                yield bytes(event.data)
            elif isinstance(event, h11.EndOfMessage | h11.ConnectionClosed):
                return

    async def aclose(self) -> None:
        """Close the connection (once its answer was read, or will never be)."""
        if self._writer is not None:
            writer, self._writer = self._writer, None
            await close_quietly(writer)


@contextlib.contextmanager
def unpreempted() -> Iterator[bool]:
    """The calling thread at real-time priority (SCHED_FIFO 1) for the block, where the OS allows it
    (root, or RLIMIT_RTPRIO): yields whether it is."""
    setscheduler = getattr(os, "sched_setscheduler", None)
    fifo = getattr(os, "SCHED_FIFO", None)
    if setscheduler is None or fifo is None:
        yield False
        return
    policy, param = os.sched_getscheduler(0), os.sched_getparam(0)
    if policy in (fifo, getattr(os, "SCHED_RR", fifo)):
        yield True  # already real-time (at a priority of its own, which is kept)
        return
    try:
        setscheduler(0, fifo, os.sched_param(1))
    except OSError:
        yield False
        return
    try:
        yield True
    finally:
        setscheduler(0, policy, param)


class _Body(httpx.AsyncByteStream):
    """A response body streamed from its wire; closing it closes the connection."""

    def __init__(self, wire: H1Wire, timeout_s: float) -> None:
        self._wire, self._timeout_s = wire, timeout_s

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._wire.body(self._timeout_s):
            yield chunk

    async def aclose(self) -> None:
        await self._wire.aclose()


class H1Burst:
    """N connections armed with N requests, released together by `release`."""

    sync = "last-byte"

    def __init__(self, wires: Sequence[H1Wire]) -> None:
        self.wires = list(wires)
        self.release_priority: str | None = None  # "real-time" or "normal", once released

    @classmethod
    async def arm(cls, requests: Sequence[httpx.Request], *, timeout_s: float) -> H1Burst:
        """Open a connection per request (to its own host), write all but the last byte, wait until
        the peers have it all."""
        burst = cls([H1Wire(r) for r in requests])
        deadline = time.monotonic() + timeout_s
        for start in range(0, len(burst.wires), CONNECTING_AT_ONCE):
            wave = burst.wires[start : start + CONNECTING_AT_ONCE]
            for port in sorted({w.port for w in wave}):
                await wait_for_room(port, sum(w.port == port for w in wave), deadline, ACCEPT_SETTLE_S)
            await asyncio.gather(*(w.connect(timeout_s) for w in wave))
        writers = [w for wire in burst.wires if (w := wire.writer) is not None]
        await wait_flushed(writers, timeout_s)
        await wait_read(writers, timeout_s)
        return burst

    def release(self) -> None:
        """Every wire's last byte, in one tight loop that the server it wakes cannot interrupt.

        Measured (docs/race-floor.md): a loopback write wakes the server's event loop on the
        writer's own CPU, and at normal priority the server then ran at once, mid-loop: it read
        the first request alone and its handler had committed before the others were read (a
        race missed in 5 trials of 20). At real-time priority the loop (0.1-0.3 ms) ends first,
        and the server reads all of them in one pass. The collector is held off for it too."""
        collecting = gc.isenabled()
        gc.disable()
        try:
            with unpreempted() as realtime:
                for wire in self.wires:
                    wire.release()
        finally:
            if collecting:
                gc.enable()
        self.release_priority = "real-time" if realtime else "normal"
        for wire in self.wires:
            if wire.released_mono is not None:
                wire.sent.set()

    @property
    def closed_half_sent(self) -> int:
        return sum(w.closed_half_sent for w in self.wires)

    async def aclose(self) -> None:
        await asyncio.gather(*(w.aclose() for w in self.wires))
