"""The single-packet burst over HTTP/2, on h2 (the protocol library under httpx's HTTP/2).

One connection (prior knowledge on ``http://``, ALPN ``h2`` on ``https://``), warmed by a
PING round trip after the settings exchange. Every request of the burst is opened as a
stream with its headers and its body but the last byte; a second PING round trip proves
the server has read every one of those frames. The release then writes the N final DATA
frames (one byte each, END_STREAM) in one write, so they leave in one TCP packet and the
server reads them in one read: the network is out of the race.

The header list is the one httpcore sends over HTTP/2 for the same `httpx.Request`
(``:method``, ``:authority`` from Host, ``:scheme``, ``:path``, then every header but Host
and Transfer-Encoding, names lowercased; h2 drops the connection-specific ones). Answers
are parsed by the same h2 connection and handed back as `httpx.Response`s whose bodies
stream under HTTP/2 flow control: a stream's unread data never exceeds its window, and the
lab reads it bounded, as any other answer.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import httpx

from acklab.harness.wire.burst_socket import close_quietly, open_stream, wait_flushed

READ_BYTES = 65536
_PINGS = itertools.count(1)


class NotHttp2(httpx.RemoteProtocolError):
    """The target did not answer the HTTP/2 connection preface with HTTP/2."""


def h2_headers(request: httpx.Request) -> list[tuple[bytes, bytes]]:
    """The header list httpcore sends for `request` over HTTP/2."""
    authority = next(v for k, v in request.headers.raw if k.lower() == b"host")
    return [
        (b":method", request.method.encode("ascii")),
        (b":authority", authority),
        (b":scheme", request.url.raw_scheme),
        (b":path", request.url.raw_path),
    ] + [(k.lower(), v) for k, v in request.headers.raw if k.lower() not in (b"host", b"transfer-encoding")]


def _shown(data: bytes) -> str:
    line = data.split(b"\r\n", 1)[0][:80]
    return repr(line.decode("latin-1"))


class H2Session:
    """One HTTP/2 connection: the h2 state machine, a reader task, and the streams on it."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        self._reader = reader
        self.h2 = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=True, header_encoding=None)
        )
        self.streams: dict[int, H2Wire] = {}
        self._ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._pings: dict[bytes, asyncio.Future[None]] = {}
        self.failure: httpx.TransportError | None = None
        self._task: asyncio.Task[None] | None = None
        self._busy: set[int] = set()  # streams whose answer the lab may still read

    @classmethod
    async def open(cls, url: httpx.URL, timeout_s: float) -> H2Session:
        """Connect, exchange settings; NotHttp2 when the target answers anything but HTTP/2."""
        reader, writer = await open_stream(url, alpn="h2", timeout_s=timeout_s)
        tls = writer.get_extra_info("ssl_object")
        if tls is not None and tls.selected_alpn_protocol() != "h2":
            await close_quietly(writer)
            raise NotHttp2(f"its TLS handshake did not select h2 (ALPN: {tls.selected_alpn_protocol()!r})")
        session = cls(reader, writer)
        session.h2.initiate_connection()
        session.flush()
        session._task = asyncio.create_task(session._read())
        try:
            await asyncio.wait_for(asyncio.shield(session._ready), timeout_s)
        except TimeoutError:
            await session.aclose()
            raise NotHttp2(f"it sent no HTTP/2 settings within {timeout_s:g} s of the preface") from None
        except httpx.TransportError:
            await session.aclose()
            raise
        return session

    def flush(self) -> None:
        data = self.h2.data_to_send()
        if data and not self.writer.transport.is_closing():
            self.writer.write(data)

    async def ping(self, timeout_s: float) -> None:
        """One round trip: every frame written before it has been read by the server."""
        if self.failure is not None:
            raise self.failure
        payload = next(_PINGS).to_bytes(8, "big")
        waiter = self._pings[payload] = asyncio.get_running_loop().create_future()
        self.h2.ping(payload)
        self.flush()
        try:
            await asyncio.wait_for(waiter, timeout_s)
        except TimeoutError as exc:
            raise httpx.ReadTimeout(
                f"the target did not answer an HTTP/2 PING within {timeout_s:g} s"
            ) from exc

    async def _read(self) -> None:
        try:
            while True:
                data = await self._reader.read(READ_BYTES)
                if not data:
                    raise (
                        httpx.RemoteProtocolError("the target closed the HTTP/2 connection")
                        if self._ready.done()
                        else NotHttp2("it closed the connection on the HTTP/2 preface")
                    )
                try:
                    events = self.h2.receive_data(data)
                except h2.exceptions.ProtocolError as exc:
                    if not self._ready.done():
                        raise NotHttp2(f"it answered the HTTP/2 preface with {_shown(data)}") from exc
                    raise httpx.RemoteProtocolError(f"the target broke HTTP/2: {exc}") from exc
                for event in events:
                    self._dispatch(event)
                self.flush()
        except httpx.TransportError as exc:
            self._fail(exc)
        except OSError as exc:
            self._fail(httpx.ReadError(f"{type(exc).__name__}: {exc}"))

    def _dispatch(self, event: Any) -> None:
        if isinstance(event, h2.events.RemoteSettingsChanged):
            if not self._ready.done():
                self._ready.set_result(None)
        elif isinstance(event, h2.events.PingAckReceived):
            waiter = self._pings.pop(event.ping_data or b"", None)
            if waiter is not None and not waiter.done():
                waiter.set_result(None)
        elif isinstance(event, h2.events.ConnectionTerminated):
            self._fail(
                httpx.RemoteProtocolError(f"the target ended the HTTP/2 connection ({event.error_code!r})")
            )
        elif (wire := self.streams.get(getattr(event, "stream_id", None) or 0)) is not None:
            wire.on_event(event)

    def _fail(self, error: httpx.TransportError) -> None:
        self.failure = self.failure or error
        if not self._ready.done():
            self._ready.set_exception(error)
        for waiter in self._pings.values():
            if not waiter.done():
                waiter.set_exception(error)
        for wire in self.streams.values():
            wire.fail(error)

    def acknowledge(self, stream_id: int, length: int) -> None:
        """Data the lab has read: the server may send that much more (flow control)."""
        if length and self.failure is None:
            try:
                self.h2.acknowledge_received_data(length, stream_id)
            except h2.exceptions.StreamClosedError:
                return
            self.flush()

    def cancel(self, stream_id: int) -> None:
        if self.failure is None:
            try:
                self.h2.reset_stream(stream_id, h2.errors.ErrorCodes.CANCEL)
            except h2.exceptions.StreamClosedError:
                return
            self.flush()

    async def done_with(self, stream_id: int) -> None:
        """The lab is done with a stream; the connection closes with its last one."""
        self._busy.discard(stream_id)
        if not self._busy:
            await self.aclose()

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        await close_quietly(self.writer)
        if self._ready.done() and not self._ready.cancelled():
            self._ready.exception()  # retrieved: a failed handshake was raised already


class H2Wire:
    """One request of a burst as a stream of its session: headers and body but the last byte."""

    def __init__(self, session: H2Session, request: httpx.Request) -> None:
        self._session = session
        self.headers = h2_headers(request)
        body = request.content
        self.head, self.last = body[:-1], body[-1:]
        self.stream_id = 0
        self.sent = asyncio.Event()
        self.claimed = asyncio.Event()
        self.released_mono: float | None = None
        self.closed_half_sent = False
        self._response: asyncio.Future[list[tuple[bytes, bytes]]] = asyncio.get_running_loop().create_future()
        self._chunks: asyncio.Queue[tuple[bytes, int] | None] = asyncio.Queue()
        self._failure: httpx.TransportError | None = None
        self._ended = False
        self._done = False

    def open(self) -> None:
        """Send the headers and the body but its last byte (not flushed: the session does that)."""
        h2c = self._session.h2
        self.stream_id = h2c.get_next_available_stream_id()
        self._session.streams[self.stream_id] = self
        self._session._busy.add(self.stream_id)
        h2c.send_headers(self.stream_id, self.headers, end_stream=False)
        step = h2c.max_outbound_frame_size
        for start in range(0, len(self.head), step):
            h2c.send_data(self.stream_id, self.head[start : start + step])

    def on_event(self, event: Any) -> None:
        if isinstance(event, h2.events.ResponseReceived):
            if not self._response.done():
                self._response.set_result(list(event.headers or []))
        elif isinstance(event, h2.events.DataReceived):
            self._chunks.put_nowait((event.data or b"", event.flow_controlled_length or 0))
        elif isinstance(event, h2.events.StreamEnded):
            self._ended = True
            self._chunks.put_nowait(None)
        elif isinstance(event, h2.events.StreamReset):
            self.fail(httpx.RemoteProtocolError(f"the target reset the stream ({event.error_code!r})"))

    def fail(self, error: httpx.TransportError) -> None:
        if self._ended or self._failure is not None:
            return
        if self.released_mono is None:
            self.closed_half_sent = True
            error = httpx.RemoteProtocolError(
                f"the target ended the stream while the request was half-sent (its last byte is held back "
                f"until the burst's release): {error}"
            )
        self._failure = error
        if not self._response.done():
            self._response.set_exception(error)
            self._response.exception()  # retrieved: response() raises it
        self._chunks.put_nowait(None)

    def release(self) -> None:
        """Queue the final DATA frame (END_STREAM); the burst writes every stream's at once."""
        if self._failure is None:
            self._session.h2.send_data(self.stream_id, self.last, end_stream=True)

    async def response(self, request: httpx.Request, timeout_s: float) -> httpx.Response:
        self.claimed.set()
        try:
            return await self._answer(request, timeout_s)
        except BaseException:
            await self.aclose()  # no answer to read: the stream is done
            raise

    async def _answer(self, request: httpx.Request, timeout_s: float) -> httpx.Response:
        try:
            headers = await asyncio.wait_for(asyncio.shield(self._response), timeout_s)
        except TimeoutError as exc:
            raise httpx.ReadTimeout(f"no answer within {timeout_s:g} s") from exc
        status = next((v for k, v in headers if k == b":status"), b"")
        if not status.isdigit():
            raise httpx.RemoteProtocolError(f"the target answered without a valid :status ({status!r})")
        return httpx.Response(
            int(status),
            headers=[(k, v) for k, v in headers if not k.startswith(b":")],
            stream=_Body(self, timeout_s),
            request=request,
            extensions={"http_version": b"HTTP/2"},
        )

    async def body(self, timeout_s: float) -> AsyncIterator[bytes]:
        while True:
            try:
                item = await asyncio.wait_for(self._chunks.get(), timeout_s)
            except TimeoutError as exc:
                raise httpx.ReadTimeout(f"the body did not continue within {timeout_s:g} s") from exc
            if item is None:
                if self._failure is not None:
                    raise self._failure
                return
            data, flow = item
            self._session.acknowledge(self.stream_id, flow)
            yield data

    async def aclose(self) -> None:
        """Done with this stream (its answer read, or never to be): cancel what is left of it."""
        if self._done:
            return
        self._done = True
        if not self._ended and self._failure is None and self.stream_id:
            self._session.cancel(self.stream_id)
        await self._session.done_with(self.stream_id)


class _Body(httpx.AsyncByteStream):
    def __init__(self, wire: H2Wire, timeout_s: float) -> None:
        self._wire, self._timeout_s = wire, timeout_s

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._wire.body(self._timeout_s):
            yield chunk

    async def aclose(self) -> None:
        await self._wire.aclose()  # a body the lab stopped reading: the server may stop sending it


class H2Burst:
    """N streams on one connection, armed; `release` sends their last bytes in one packet."""

    sync = "single-packet"
    release_priority = None  # one write: there is no loop for the server to preempt

    def __init__(self, session: H2Session, wires: Sequence[H2Wire]) -> None:
        self.session, self.wires = session, list(wires)

    @classmethod
    async def arm(cls, url: httpx.URL, requests: Sequence[httpx.Request], *, timeout_s: float) -> H2Burst:
        """Open the connection, warm it, open every stream but its last byte, prove the server read them."""
        session = await H2Session.open(url, timeout_s)
        try:
            await session.ping(timeout_s)
            wires = [H2Wire(session, r) for r in requests]
            _check_capacity(session, wires)
            for wire in wires:
                wire.open()
            session.flush()
            await wait_flushed([session.writer], timeout_s)
            await session.ping(timeout_s)
        except BaseException:
            await session.aclose()
            raise
        return cls(session, wires)

    def release(self) -> None:
        if self.session.failure is not None:
            for wire in self.wires:
                wire.fail(self.session.failure)
            return
        for wire in self.wires:
            wire.release()
        data = self.session.h2.data_to_send()
        self.session.writer.write(data)  # one write, NODELAY: one TCP packet
        now = time.monotonic()
        for wire in self.wires:
            wire.released_mono = now
            wire.sent.set()

    @property
    def closed_half_sent(self) -> int:
        return sum(w.closed_half_sent for w in self.wires)

    async def aclose(self) -> None:
        await self.session.aclose()


def _check_capacity(session: H2Session, wires: Sequence[H2Wire]) -> None:
    """A burst that cannot fit in one flight is refused, with the server's limit named."""
    h2c = session.h2
    limit = h2c.remote_settings.max_concurrent_streams
    if limit is not None and len(wires) > limit:
        raise httpx.RemoteProtocolError(
            f"the target allows {limit} concurrent HTTP/2 streams; a single-packet burst of {len(wires)} "
            f"needs {len(wires)} (lower --burst to {limit}, or use --burst-sync last-byte)"
        )
    needed = sum(len(w.head) + len(w.last) for w in wires)
    window = h2c.outbound_flow_control_window
    if needed > window:
        raise httpx.RemoteProtocolError(
            f"the burst's bodies take {needed} bytes; the target's HTTP/2 flow-control window is {window} "
            "(lower --burst, or use --burst-sync last-byte)"
        )


async def speaks_http2(url: httpx.URL, timeout_s: float) -> str | None:
    """None when the target at `url` speaks HTTP/2 (a settings exchange and a PING); else why not."""
    try:
        session = await H2Session.open(url, timeout_s)
    except NotHttp2 as exc:
        return str(exc)
    except httpx.TransportError as exc:
        return f"the HTTP/2 handshake failed: {exc}"
    try:
        await session.ping(timeout_s)
    except httpx.TransportError as exc:
        return f"it did not answer an HTTP/2 PING: {exc}"
    finally:
        await session.aclose()
    return None
