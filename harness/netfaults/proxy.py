"""A TCP fault proxy on loopback: forwards to one upstream and breaks the link on demand.

    async with FaultProxy(upstream=("127.0.0.1", pg_port), probe=postgres_probe) as proxy:
        url = f"postgresql://...@127.0.0.1:{proxy.listen_port}/db"
        async with proxy.inject(Latency(ms=200, jitter=50)):
            ...  # every connection, open or new, now sees the fault

One fault at a time. Leaving `inject` lifts the fault and then verifies the link: a fresh
connection through the proxy must round-trip (the probe) — on error too, so a trial never
leaves a broken link behind (compensation). Every step is an `events.ProxyEvent`.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import random
import socket
import struct
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Self, TypeAlias

from . import toxics
from .errors import FaultInUse, LinkUnhealthy, NetFaultError, ProxyRefused
from .events import EventKind, EventListener, ProxyEvent
from .faults import Down, Fault
from .toxics import Direction

CHUNK = 32 * 1024
Probe: TypeAlias = Callable[[str, int], Awaitable[None]]
"""Round-trips one fresh connection to (host, port) or raises; `postgres_probe` is one."""


async def postgres_probe(host: str, port: int, *, timeout: float = 5.0) -> None:
    """Ask a PostgreSQL server (through the proxy) whether it speaks SSL: one byte comes back.

    The SSLRequest packet needs no credentials and every PostgreSQL answers it with ``N``
    or ``S``, so it proves a fresh connection reaches the server and back.
    """
    reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
    try:
        writer.write(struct.pack("!ii", 8, 80877103))
        await writer.drain()
        answer = await asyncio.wait_for(reader.read(1), timeout)
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
    if answer not in (b"N", b"S"):
        raise LinkUnhealthy(f"postgres probe to {host}:{port}: got {answer!r}; expected b'N' or b'S'")


class FaultProxy:
    """A TCP proxy from a loopback port to ``upstream`` that injects one fault at a time."""

    def __init__(
        self,
        upstream: tuple[str, int],
        *,
        listen_host: str = "127.0.0.1",
        listen_port: int = 0,
        name: str | None = None,
        probe: Probe | None = None,
        probe_timeout: float = 5.0,
        seed: int = 0,
        listener: EventListener | None = None,
    ) -> None:
        if not ipaddress.ip_address(listen_host).is_loopback:
            raise ProxyRefused(
                f"got listen_host={listen_host!r}; the fault proxy listens on loopback only (127.0.0.1)"
            )
        self.upstream = upstream
        self.listen_host = listen_host
        self._port = listen_port
        self.name = name or f"proxy->{upstream[0]}:{upstream[1]}"
        self._probe = probe
        self._probe_timeout = probe_timeout
        # Jitter and slice sizes, not secrets; seeded so a trial can be replayed.
        self.rng = random.Random(seed)  # noqa: S311  # nosec B311
        self._listeners = [listener] if listener else []
        self._events: list[ProxyEvent] = []
        self._server: asyncio.Server | None = None
        self._connections: set[_Connection] = set()
        self._fault: Fault | None = None

    # -- lifecycle -------------------------------------------------------------------------
    async def start(self) -> None:
        """Listen on the loopback port (a free one when 0)."""
        await self._listen()
        self._emit(
            "started", detail=f"{self.listen_host}:{self._port} -> {self.upstream[0]}:{self.upstream[1]}"
        )

    async def stop(self) -> None:
        """Close every proxied connection, wait for them to end, and stop listening."""
        for conn in list(self._connections):
            conn.close("proxy stopped")
        for _ in range(200):  # their transports must be closed before the loop goes away
            if not self._connections:
                break
            await asyncio.sleep(0.005)
        await self._unlisten()
        self._emit("stopped")

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @property
    def listen_port(self) -> int:
        """The port clients connect to (fixed once started)."""
        return self._port

    @property
    def fault(self) -> Fault | None:
        """The fault in force, if any."""
        return self._fault

    @property
    def events(self) -> tuple[ProxyEvent, ...]:
        """Everything the proxy did so far, oldest first."""
        return tuple(self._events)

    def subscribe(self, listener: EventListener) -> None:
        """Also send every later event to ``listener`` (a journal, a progress display)."""
        self._listeners.append(listener)

    # -- faults ----------------------------------------------------------------------------
    @contextlib.asynccontextmanager
    async def inject(self, fault: Fault) -> AsyncIterator[Fault]:
        """Inject ``fault`` for the body; then lift it and verify the link, even on error."""
        await self.apply(fault)
        try:
            yield fault
        finally:
            await self.lift()
            await self.verify_healthy()

    async def apply(self, fault: Fault) -> None:
        """Inject ``fault`` on every open connection and every new one, until `lift`."""
        if self._fault is not None:
            raise FaultInUse(
                f"{self.name}: got {fault.record()['type']} while {self._fault.record()['type']} "
                "is injected; lift it first (one fault at a time)"
            )
        self._fault = fault
        self._emit("injected", fault=fault)
        for conn in list(self._connections):
            conn.begin(fault)
        if isinstance(fault, Down):
            await self._unlisten()

    async def lift(self) -> None:
        """Remove the fault in force (a no-op when there is none); re-listen after `down`."""
        fault, self._fault = self._fault, None
        if fault is None:
            return
        for conn in list(self._connections):
            conn.end()
            if toxics.closes_on_lift(fault):
                # What the blackhole swallowed left the protocol out of step: end it cleanly.
                conn.close(f"{fault.toxic} lifted")
        if isinstance(fault, Down):
            try:
                await self._listen()
            except OSError as exc:
                self._emit("health-failed", fault=fault, detail=f"could not listen again: {exc}")
                raise LinkUnhealthy(
                    f"{self.name}: could not listen on port {self._port} again: {exc}"
                ) from exc
        self._emit("lifted", fault=fault)

    async def verify_healthy(self) -> None:
        """Round-trip a fresh connection through the proxy, or raise `LinkUnhealthy`."""
        probe = self._probe or self._connect_probe
        try:
            await asyncio.wait_for(probe(self.listen_host, self._port), self._probe_timeout)
        except (OSError, TimeoutError, LinkUnhealthy) as exc:
            self._emit("health-failed", detail=f"{type(exc).__name__}: {exc}")
            raise LinkUnhealthy(
                f"{self.name}: a fresh connection through 127.0.0.1:{self._port} did not round-trip "
                f"after the fault was lifted ({type(exc).__name__}: {exc}); is the upstream up?"
            ) from exc
        self._emit("healthy-verified", detail=getattr(probe, "__name__", repr(probe)))

    async def _connect_probe(self, host: str, port: int) -> None:
        """Protocol-free probe: the proxy accepts a fresh connection and reaches the upstream."""
        reader, writer = await asyncio.open_connection(host, port)
        try:
            local = writer.get_extra_info("sockname")
            while not any(conn.peer == local for conn in self._connections):
                if reader.at_eof():
                    raise LinkUnhealthy(f"the proxy closed the probe: upstream {self.upstream} unreachable")
                await asyncio.sleep(0.005)
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    # -- plumbing --------------------------------------------------------------------------
    async def _listen(self) -> None:
        try:
            self._server = await asyncio.start_server(
                self._on_client, self.listen_host, self._port, reuse_address=True
            )
        except OSError as exc:
            raise NetFaultError(
                f"{self.name}: cannot listen on {self.listen_host}:{self._port}: {exc}"
            ) from exc
        self._port = int(self._server.sockets[0].getsockname()[1])

    async def _unlisten(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.close()
            await server.wait_closed()

    async def _on_client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._server is None or isinstance(self._fault, Down):
            writer.close()  # a connection accepted in the instant the proxy went down
            return
        try:
            up_reader, up_writer = await asyncio.wait_for(asyncio.open_connection(*self.upstream), 10)
        except (OSError, TimeoutError) as exc:
            self._emit("connection-closed", detail=f"upstream {self.upstream} unreachable: {exc}")
            writer.close()
            return
        conn = _Connection(self, reader, writer, up_reader, up_writer)
        self._connections.add(conn)
        if self._fault is not None:
            conn.begin(self._fault)
        try:
            await conn.run()
        finally:
            self._connections.discard(conn)

    def _emit(self, kind: EventKind, *, fault: Fault | None = None, detail: str = "") -> None:
        event = ProxyEvent(kind=kind, proxy=self.name, fault=fault.record() if fault else None, detail=detail)
        self._events.append(event)
        for listener in self._listeners:
            listener(event)


class _Connection:
    """One proxied connection: two pumps (one per direction) and the fault held on it."""

    def __init__(
        self,
        proxy: FaultProxy,
        client_reader: asyncio.StreamReader,
        client_writer: asyncio.StreamWriter,
        upstream_reader: asyncio.StreamReader,
        upstream_writer: asyncio.StreamWriter,
    ) -> None:
        self.proxy = proxy
        self.peer = client_writer.get_extra_info("peername")
        self._client = (client_reader, client_writer)
        self._upstream = (upstream_reader, upstream_writer)
        self._passed: dict[Direction, int] = {"upstream": 0, "downstream": 0}
        self._holding: asyncio.Task[None] | None = None
        self._quiet_since = time.monotonic()
        self._ended = False

    async def run(self) -> None:
        pumps = (
            self._pump("upstream", self._client[0], self._upstream[1]),
            self._pump("downstream", self._upstream[0], self._client[1]),
        )
        try:
            await asyncio.gather(*pumps)
        finally:
            self.end()
            self._shut(abort=False)

    def begin(self, fault: Fault) -> None:
        """A fault starts on this connection: count bytes afresh, start holding it if it acts on links."""
        self.end()
        self._passed = {"upstream": 0, "downstream": 0}
        self._quiet_since = time.monotonic()
        if toxics.holds(fault):
            self._holding = asyncio.get_running_loop().create_task(toxics.hold(fault, self))

    def end(self) -> None:
        """The fault is lifted from this connection."""
        if self._holding is not None:
            self._holding.cancel()
            self._holding = None

    def idle_s(self) -> float:
        return time.monotonic() - self._quiet_since

    def close(self, why: str) -> None:
        if not self._ended:
            self.proxy._emit("connection-closed", fault=self.proxy.fault, detail=f"{self.peer}: {why}")
        self._shut(abort=False)

    def reset(self, why: str) -> None:
        if not self._ended:
            self.proxy._emit("connection-reset", fault=self.proxy.fault, detail=f"{self.peer}: {why}")
        for _, writer in (self._client, self._upstream):
            sock = writer.get_extra_info("socket")
            if sock is not None:
                with contextlib.suppress(OSError):
                    # SO_LINGER on, timeout 0: closing sends RST instead of FIN.
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self._shut(abort=True)

    def _shut(self, *, abort: bool) -> None:
        self._ended = True
        for _, writer in (self._client, self._upstream):
            if abort:
                writer.transport.abort()
            else:
                writer.close()

    async def _pump(
        self, direction: Direction, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        pipe = _Pipe(self, direction, writer)
        try:
            while not self._ended and (chunk := await reader.read(CHUNK)):
                fault = self.proxy.fault
                if fault is not None and fault.acts_on(direction):
                    await toxics.shape(fault, chunk, pipe)
                else:
                    await pipe.write(chunk)
            delay = toxics.close_delay_s(self.proxy.fault, direction)
            if delay:
                await asyncio.sleep(delay)
            if not writer.is_closing() and writer.can_write_eof():
                writer.write_eof()  # pass the peer's half-close on
        except (ConnectionError, OSError):
            if not self._ended:  # one side broke: break the other, as a real cut would
                self._shut(abort=True)


class _Pipe:
    """One direction of a `_Connection`, as `toxics.shape` sees it."""

    def __init__(self, conn: _Connection, direction: Direction, writer: asyncio.StreamWriter) -> None:
        self.direction: Direction = direction
        self.rng = conn.proxy.rng
        self._conn = conn
        self._writer = writer

    async def write(self, data: bytes) -> None:
        if self._conn._ended or self._writer.is_closing():
            return  # the proxy closed this connection on purpose; what is left is not sent
        self._writer.write(data)
        self._conn._passed[self.direction] += len(data)
        await self._writer.drain()

    def passed(self) -> int:
        return self._conn._passed[self.direction]

    def dropped(self) -> None:
        self._conn._quiet_since = time.monotonic()

    def close(self, why: str) -> None:
        self._conn.close(why)

    def reset(self, why: str) -> None:
        self._conn.reset(why)
