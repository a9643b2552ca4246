"""How a delivery travels: the two plain transports, and the lab transport around either.

All three are `httpx.AsyncBaseTransport`s (one seam per variation): an experiment gets a
client and never knows whether its requests go to an in-process ASGI app or through a
real socket, nor which fault is applied — the plan decides that per delivery.

`FaultTransport` forwards every delivery to the inner transport in a task of its own, with
the lab's long horizon as timeout, and records what the handler answered. What the
*sender* sees is decided by the delivery's fault (`harness.wire.faults`): the handler's answer,
a timeout, a reset or a synthetic 504. The handler is never cut off by the sender giving
up, so the lab can wait for it (quiescence) before it reads the effects back.

A delivery of a synchronised burst (`harness.core.bursts`) carries a `Wire` in its ticket: its
bytes were already written by the burst sender, all but the last, and its answer comes
from that wire instead of the inner transport. Everything else — the fault, the record,
the bounded read of the answer — is the same for every delivery.
"""

from __future__ import annotations

import asyncio
import functools
import re
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import httpx

from acklab.evidence.clock import utcnow
from acklab.harness.wire.bodies import KEEP_BYTES, LIMIT_BYTES, read_capped
from acklab.harness.wire.records import DeliveryRecord

if TYPE_CHECKING:
    from acklab.harness.wire.faults import Fault

TICKET = "acklab.ticket"
DEFAULT_HORIZON_S = 30.0
# The built-in fixture and the bench's racy handler say when a request entered the handler:
# CLOCK_MONOTONIC in nanoseconds, shared by every process of this machine. The lab only
# measures a burst's arrival spread with it; no verdict reads it (the handler says it).
ENTERED_HEADER = "x-acklab-entered-ns"
# The fixture also says when its server had read the whole request (the server's side of it).
RECEIVED_HEADER = "x-acklab-received-ns"
_NANOSECONDS = re.compile(r"[0-9]{1,20}")


def entered_ns(headers: httpx.Headers, name: str = ENTERED_HEADER) -> int | None:
    """When the handler says the request entered it (monotonic ns), or None (absent or malformed);
    `name` RECEIVED_HEADER: when the server had read it."""
    value = headers.get(name)
    return int(value) if value is not None and _NANOSECONDS.fullmatch(value) else None


def asgi_transport(app: Any) -> httpx.AsyncBaseTransport:
    """In-process: the ASGI app is called in this event loop (no socket, no server).

    Its answer is bounded like a socket's: httpx keeps every body chunk an app sends, so the
    app's body is cut one byte past `LIMIT_BYTES` as it is sent (the read then says truncated).
    An app that returns without a complete response is answered as a server would: the
    connection closed without an answer (`httpx.RemoteProtocolError`), the handler's failure.
    """
    # A handler crash must reach the lab as the 500 a server would send, not as an exception.
    return _InProcess(httpx.ASGITransport(app=_capped_app(app, LIMIT_BYTES + 1), raise_app_exceptions=False))


def _capped_app(app: Any, limit: int) -> Any:
    """`app` with its response body cut after `limit` bytes (what follows is dropped, unbuffered)."""

    async def capped(scope: Any, receive: Any, send: Any) -> None:
        sent = 0

        async def bounded(message: Any) -> None:
            nonlocal sent
            if isinstance(message, dict) and message.get("type") == "http.response.body":
                body = message.get("body", b"")
                room = max(0, limit - sent)
                if len(body) > room:
                    message = {**message, "body": body[:room]}
                sent += len(message.get("body", b""))
            await send(message)

        await app(scope, receive, bounded)

    return capped


class _InProcess(httpx.AsyncBaseTransport):
    """httpx's ASGI transport, with an app that never completed its response as a closed connection,
    and a cancellation that reached the app while it answered always a cancellation."""

    def __init__(self, inner: httpx.ASGITransport) -> None:
        self._inner = inner

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        task = asyncio.current_task()
        cancels = task.cancelling() if task is not None else 0
        try:
            response = await self._inner.handle_async_request(request)
        except AssertionError as exc:  # httpx asserts the app started and completed a response
            _cancelled_meanwhile(task, cancels)
            raise httpx.RemoteProtocolError(
                "the app returned without sending a complete response", request=request
            ) from exc
        except Exception:
            _cancelled_meanwhile(task, cancels)
            raise
        _cancelled_meanwhile(task, cancels)
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()


def _cancelled_meanwhile(task: asyncio.Task[Any] | None, before: int) -> None:
    """CancelledError when `task` was cancelled while the app ran in it. The app runs in the
    lab's own task: the lab's cancellation (Ctrl-C, SIGTERM, a deadline, a delivery's timeout) is
    thrown into the app, and an app may make something else of it — FastAPI closes a sync
    endpoint's session while its thread still uses it, SQLAlchemy raises, and httpx answers 500.
    The cancellation would be lost: the run going on to its end, the interrupted trial an error."""
    if task is not None and task.cancelling() > before:
        raise asyncio.CancelledError


@functools.cache
def tls() -> ssl.SSLContext:
    """The one TLS context of every HTTP client the lab makes. httpx builds a context per client
    or transport otherwise, loading the CA bundle each time: 50-250 ms on a busy machine, paid
    per probe, per experiment and per readiness check (loopback targets never use it)."""
    return httpx.create_ssl_context(trust_env=False)


def socket_transport(max_connections: int = 256) -> httpx.AsyncBaseTransport:
    """A real TCP connection per concurrent request (httpx's default transport, no retries)."""
    limits = httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections)
    return httpx.AsyncHTTPTransport(retries=0, limits=limits, verify=tls())


# Headers that describe the body as it travelled; the sender gets what the lab kept of it.
_BODY_HEADERS = frozenset({"content-length", "transfer-encoding", "content-encoding"})


@dataclass(frozen=True)
class HandlerAnswer:
    """The handler's response as it reached the lab: its status and headers, and the body the
    lab kept of it (bounded: `harness.wire.bodies`)."""

    response: httpx.Response

    @property
    def status(self) -> int:
        return self.response.status_code


class Wire(Protocol):
    """One delivery of a synchronised burst: a connection (or an HTTP/2 stream) that already
    holds the request but its last byte (`harness.wire.burst_h1`, `harness.wire.burst_h2`)."""

    sent: asyncio.Event  # set once the last byte was written
    released_mono: float | None  # when it was

    async def response(self, request: httpx.Request, timeout_s: float) -> httpx.Response:
        """The answer to the request (its body streamed, read bounded by the caller)."""
        ...


@dataclass
class Ticket:
    """Travels with one delivery in ``request.extensions``: its record, fault and sender timeout."""

    record: DeliveryRecord
    fault: Fault
    sender_timeout_s: float
    # lost-ack: read the effects back before the synthetic status goes to the sender (True: seen)
    confirm: Callable[[DeliveryRecord, int], Awaitable[bool]] | None = None
    # A synchronised burst: the wire that carries this delivery (None: the inner transport does)
    wire: Wire | None = None


class _SignalingStream(httpx.AsyncByteStream):
    """The request body; sets `sent` once every byte was handed to the transport."""

    def __init__(self, inner: Any, sent: asyncio.Event, record: DeliveryRecord) -> None:
        self._inner, self._sent, self._record = inner, sent, record

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._inner:
            yield chunk
        self._record.written_mono = time.monotonic()  # concurrent-duplicates: the burst's spread
        self._sent.set()


class Exchange:
    """One delivery in flight, as a fault sees it."""

    def __init__(
        self, request: httpx.Request, task: asyncio.Task[HandlerAnswer], sent: asyncio.Event, ticket: Ticket
    ) -> None:
        self.request, self.ticket = request, ticket
        self._task, self._sent = task, sent
        # The sender's clock starts where the handler's latency does (`_forward`): a timeout and
        # the latency that proves it fired are one measure.
        handed = ticket.record.sent_mono
        self._started = handed if handed is not None else time.monotonic()

    async def answer(self) -> HandlerAnswer:
        """Wait for the handler's answer (the lab's horizon); re-raise its transport error."""
        return await asyncio.shield(self._task)

    async def answer_within(self, timeout_s: float) -> HandlerAnswer:
        """The handler's answer if it comes within `timeout_s` of sending; else a sender timeout."""
        remaining = max(0.0, timeout_s - (time.monotonic() - self._started))
        if not self._task.done():
            # Cheaper than wait_for(shield(...)) on this hot path: one waiter, one timer, and
            # the handler's task is never cancelled by the sender giving up.
            waiter = asyncio.get_running_loop().create_future()

            def wake(_: object) -> None:
                if not waiter.done():
                    waiter.set_result(None)

            self._task.add_done_callback(wake)
            timer = asyncio.get_running_loop().call_later(remaining, wake, None)
            try:
                await waiter
            finally:
                timer.cancel()
                self._task.remove_done_callback(wake)
        # A timeout only when the answer was not there when the expired timer was seen: the loop runs
        # a turn's socket callbacks before its timers, so an answer it finds in the same turn may have
        # come before the deadline (the lab's process busy or descheduled meanwhile) and is the
        # sender's. A sender timeout is then proven: the answer came after the deadline. Counting the
        # answer's read time instead made a loaded lab time out correct handlers on its own delay.
        if not self._task.done():
            raise httpx.ReadTimeout(f"sender timed out after {timeout_s:.3f} s", request=self.request)
        return self._task.result()

    async def request_sent(self) -> None:
        """Return once the whole request was handed over; re-raise if it never could be."""
        sent = asyncio.ensure_future(self._sent.wait())
        try:
            await asyncio.wait({sent, self._task}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            sent.cancel()
        if not self._sent.is_set():
            await self.answer()  # finished without sending: raises its error (e.g. connect refused)

    async def confirm_commit(self, synthetic_status: int) -> bool:
        """Whether the handler's commit was seen (through the effects probe) before the sender is told."""
        if self.ticket.confirm is None:
            return False
        return await self.ticket.confirm(self.ticket.record, synthetic_status)

    def respond(self, answer: HandlerAnswer) -> httpx.Response:
        """The handler's own response, handed on to the sender (its body is already read)."""
        return answer.response

    def cut(self, failure: httpx.TransportError) -> httpx.TransportError:
        """`failure`, raised at the sender by the lab's own fault (a reset, an answer withheld): the
        record says the lab cut the exchange (``cut-by-lab``), whatever the exception's class."""
        self.ticket.record.cut_by_lab = True
        return failure

    def synthetic(self, status: int, why: str) -> httpx.Response:
        return httpx.Response(
            status, headers={"x-acklab-fault": why}, content=f"acklab: {why}".encode(), request=self.request
        )


@asynccontextmanager
async def _bounded(timeout_s: float, request: httpx.Request) -> AsyncIterator[None]:
    """`timeout_s` for everything inside, ended as the httpx timeout a sender would see."""
    try:
        async with asyncio.timeout(timeout_s):
            yield
    except TimeoutError as exc:
        raise httpx.ReadTimeout(
            f"no answer within the lab's {timeout_s:g} s per delivery", request=request
        ) from exc


class FaultTransport(httpx.AsyncBaseTransport):
    """Wraps an inner transport; applies each delivery's fault and records the handler's answer."""

    def __init__(self, inner: httpx.AsyncBaseTransport, *, horizon_s: float = DEFAULT_HORIZON_S) -> None:
        self._inner, self._horizon_s = inner, horizon_s
        self._inflight: set[asyncio.Task[HandlerAnswer]] = set()

    @property
    def inflight(self) -> int:
        return len(self._inflight)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        ticket = request.extensions.pop(TICKET, None)
        if ticket is None:  # not a delivery (e.g. a warm-up request): pass through untouched
            return await self._inner.handle_async_request(request)
        if not isinstance(ticket, Ticket):
            raise TypeError(f"request.extensions[{TICKET!r}] must be a Ticket; got {type(ticket).__name__}")
        if ticket.wire is None:
            sent = asyncio.Event()
            request.stream = _SignalingStream(request.stream, sent, ticket.record)
        else:
            sent = ticket.wire.sent  # the burst sender writes the bytes, and says when the last went
        # The handler side waits up to the lab's horizon; the sender's own timeout is the fault's business.
        request.extensions["timeout"] = dict.fromkeys(("connect", "read", "write", "pool"), self._horizon_s)
        ticket.record.sent_at = utcnow()
        ticket.record.sent_mono = time.monotonic()
        task = asyncio.create_task(self._forward(request, ticket.record, ticket.wire))
        self._inflight.add(task)
        task.add_done_callback(self._settled)
        return await ticket.fault.sender_view(Exchange(request, task, sent, ticket))

    def _settled(self, task: asyncio.Task[HandlerAnswer]) -> None:
        self._inflight.discard(task)
        if not task.cancelled():
            task.exception()  # retrieved here: a fault may never look at it

    async def _forward(
        self, request: httpx.Request, record: DeliveryRecord, wire: Wire | None = None
    ) -> HandlerAnswer:
        # From the moment the lab handed the request over, the task's own start delayed by a busy loop included.
        started = record.sent_mono if record.sent_mono is not None else time.monotonic()
        try:
            # The horizon bounds the whole answer, not each read: a handler that trickles a
            # byte a second is cut off like one that hangs.
            async with _bounded(self._horizon_s, request):
                if wire is None:
                    response = await self._inner.handle_async_request(request)
                else:
                    response = await wire.response(request, self._horizon_s)
                    # A burst's latency runs from the release of its last byte, not from the arming.
                    started = wire.released_mono if wire.released_mono is not None else started
                record.handler_entered_ns = entered_ns(response.headers)
                record.server_received_ns = entered_ns(response.headers, RECEIVED_HEADER)
                try:
                    # Streamed and bounded: a handler that answers a gigabyte costs the lab 2 KiB.
                    body = await read_capped(response, KEEP_BYTES, LIMIT_BYTES)
                finally:
                    await response.aclose()
        except httpx.HTTPError as exc:
            record.finish_handler(status=None, latency_ms=(time.monotonic() - started) * 1000, failure=exc)
            raise
        record.finish_handler(
            status=response.status_code,
            latency_ms=(time.monotonic() - started) * 1000,
            excerpt=body.data.decode("utf-8", errors="replace"),
            body=body,
        )
        headers = [(k, v) for k, v in response.headers.multi_items() if k.lower() not in _BODY_HEADERS]
        kept = httpx.Response(
            response.status_code,
            headers=headers,
            content=body.data,
            request=request,
            extensions=response.extensions,
        )
        return HandlerAnswer(kept)

    async def quiesce(self, timeout_s: float) -> bool:
        """Wait until no delivery is in flight; False when some still are after `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        while self._inflight:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            await asyncio.wait(set(self._inflight), timeout=remaining)
        return True

    async def aclose(self) -> None:
        for task in list(self._inflight):
            task.cancel()
        if self._inflight:
            await asyncio.wait(set(self._inflight), timeout=5)
        await self._inner.aclose()
