"""A user's ASGI or WSGI app as a target, served by the lab inside this process.

This is the target behind ``acklab.attack`` and the pytest plugin's ``webhook_lab``: the
app object itself, not a URL. Its lifespan runs once for the run (started before the first
delivery, shut down after the end-of-run re-read), as a deployed app's does:

* in-process (``serving="auto"``, the default): deliveries reach the app through the
  harness's ASGI transport in this event loop — no socket, no server — wrapped in the
  `FaultTransport` like every other target's;
* on a loopback socket where an experiment needs a real connection (a reset, a sender
  timeout on a live connection, a concurrent burst: `Needs.socket`): uvicorn serves the
  same app object in a thread of this process (`ThreadedServer`), started for the first
  such experiment and kept for those that follow it directly (a deployed server is not
  restarted between two webhooks either). When the app is next served in-process, that
  server takes no more deliveries but keeps running — work the app left running in its
  loop may still add effects, and the end-of-run re-read must see them (DESIGN.md: the
  service is not stopped before it) — until the run ends (`aclose`). Its lifespan then
  overlaps the in-process one: lifespan *state* is per server; an app that keeps its
  resources in module globals or ``app.state`` shares them;
* ``serving="socket"``: every experiment over uvicorn on loopback;
* ``serving="in-process"``: never a socket; an experiment that needs one is skipped with
  the reason (`Target.unservable`), never silently dropped.

Either way the lab watches what the app is doing (`harness.targets.activity`): the calls in
flight into it and the tasks they left running, so a count read once the app is idle is
settled without waiting out a window.

Requests carry the endpoint's host (``testserver`` by default, as Starlette's and Django's
test clients send) over the socket too, so host checks (Django's ``ALLOWED_HOSTS``) see
the same request either way. Effects are counted by the user's callable, a read-only SQL
query, or an HTTP path of the same app (served the same way as the endpoint).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import ClassVar

import httpx

from acklab.harness.sinks import Sinks
from acklab.harness.specs.target import SqlEffects
from acklab.harness.targets.activity import Activity, observed, unwatch
from acklab.harness.targets.asgi import AsgiApp, running
from acklab.harness.targets.base import Endpoint, Needs, Target
from acklab.harness.targets.callables import (
    CallableProbe,
    CallableState,
    CallableThread,
    Reader,
    callable_thread,
    takes_object,
)
from acklab.harness.targets.capabilities import Capabilities, Missing
from acklab.harness.targets.effects import (
    OBJECT_PARAMETER,
    OBJECT_PLACEHOLDER,
    EffectsProbe,
    HttpProbe,
    SqlProbe,
)
from acklab.harness.targets.objects import ObjectReads
from acklab.harness.targets.server import ThreadedServer
from acklab.harness.targets.state import HttpState, SqlState, StateProbe
from acklab.harness.wire.transports import asgi_transport, socket_transport

SERVING = ("auto", "in-process", "socket")
IN_THIS_PROCESS = (
    "this app runs inside the test's own process (the lab cannot kill it without killing the tests); "
    "attack it as a service with `acklab run --target SPEC` where the spec's command: starts it"
)
OWN_DB_LINK = (
    "an app served in this process keeps its own database connection (the lab puts its proxy only in front "
    "of the built-in fixture's database)"
)
NEEDS_SOCKET = (
    "it needs a real connection (a reset, a sender timeout on a live connection or a concurrent "
    "burst) and attack(serving='in-process') serves the app without a socket; use serving='auto' "
    "to let the lab serve it on loopback with uvicorn for this experiment"
)


@dataclass(frozen=True)
class AppEffects:
    """How the effects (and the state) of one event are read: exactly one of the four ways."""

    count: Reader | None = None  # the user's callable
    read_state: Reader | None = None
    sql: SqlEffects | None = None  # read-only queries (the URL read from env:)
    # An effects endpoint: `path` on the app itself, or `url` of another local service.
    path: str | None = None
    url: str | None = None
    json_path: str = "count"
    state_path: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)
    shown: str | None = None  # how messages name `url` (env:NAME when it came from the environment)

    @property
    def kind(self) -> str:
        if self.count is not None:
            return "callable"
        if self.sql is not None:
            return "sql"
        return "http"


class _Host(httpx.AsyncBaseTransport):
    """Sends every request with the app's own Host header (the socket's address is not the app's host)."""

    def __init__(self, inner: httpx.AsyncBaseTransport, host: str) -> None:
        self._inner, self._host = inner, host

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        request.headers["Host"] = self._host
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self._inner.aclose()


@dataclass
class AppTarget(Target):
    """An ASGI app (a WSGI one already adapted) served by the lab in this process."""

    app: AsgiApp | None = field(default=None, repr=False)
    base_url: str = "http://testserver"  # scheme and host the app sees (no socket behind it in-process)
    path: str = "/"  # the endpoint's path (and query) on the app
    effects: AppEffects = field(default_factory=AppEffects)
    lifespan: bool = True
    serving: str = "auto"
    close: Callable[[], None] | None = field(default=None, repr=False)
    where: Path | None = None  # the folder the handler's code is taken from (the test's)
    _server: ThreadedServer | None = field(default=None, repr=False)  # the one taking deliveries
    _parked: list[ThreadedServer] = field(default_factory=list, repr=False)  # kept until the run ends
    _thread: CallableThread | None = field(default=None, repr=False)  # the callables' (`callables`)
    activity: Activity = field(default_factory=Activity, repr=False)
    # The app started in this event loop (its lifespan entered), kept until the run ends.
    _started: AsgiApp | None = field(default=None, repr=False)
    _lifespan: AsyncExitStack | None = field(default=None, repr=False)
    # effects.smtp / effects.outbound, started by the caller (webhook_lab.sinks) for the whole run
    sinks: Sinks | None = field(default=None, repr=False)

    def sinks_of(self) -> Sinks | None:
        return self.sinks

    @property
    def host(self) -> str:
        return httpx.URL(self.base_url).netloc.decode("ascii")

    def unservable(self, needs: Needs) -> str | None:
        return NEEDS_SOCKET if needs.socket and self.serving == "in-process" else None

    def capabilities(self) -> Capabilities:
        return replace(super().capabilities(), process=Missing(IN_THIS_PROCESS), db_link=Missing(OWN_DB_LINK))

    def source_dir(self) -> Path | None:
        return self.where

    def database_urls(self) -> tuple[str, ...]:
        return (self.effects.sql.url,) if self.effects.sql is not None else ()

    def object_reads(self) -> ObjectReads:
        effects = self.effects
        if effects.count is not None:
            state = takes_object(effects.read_state) if effects.read_state is not None else None
            return ObjectReads(takes_object(effects.count), state)
        if effects.sql is not None:
            sql = effects.sql
            state = OBJECT_PARAMETER.search(sql.state) is not None if sql.state is not None else None
            return ObjectReads(OBJECT_PARAMETER.search(sql.count) is not None, state)
        by_url = OBJECT_PLACEHOLDER.search(str(effects.path or effects.url)) is not None
        return ObjectReads(by_url, by_url if effects.state_path else None)

    def _probes(
        self, base: str, transport: Callable[[], httpx.AsyncBaseTransport]
    ) -> tuple[EffectsProbe, StateProbe | None]:
        effects = self.effects
        state: StateProbe | None = None
        if effects.count is not None:
            if self._thread is None:
                self._thread = callable_thread()
            if effects.read_state is not None:
                state = CallableState(effects.read_state, self._thread)
            return CallableProbe(effects.count, self._thread), state
        if effects.sql is not None:
            sql = effects.sql
            if sql.state is not None:
                state = SqlState(sql.url, sql.state)
            return SqlProbe(sql.url, sql.count), state
        if effects.path is not None:  # an HTTP path of the app itself, served as the endpoint is
            url = base + effects.path
            if effects.state_path:
                state = HttpState(url, effects.state_path, headers=effects.headers, transport=transport())
            return HttpProbe(url, effects.json_path, transport=transport(), headers=effects.headers), state
        url = str(effects.url)
        if effects.state_path:
            state = HttpState(url, effects.state_path, headers=effects.headers)
        return HttpProbe(url, effects.json_path, headers=effects.headers, shown=effects.shown), state

    def waiting_on(self) -> str | None:
        return None if self._thread is None else self._thread.waiting_on()

    async def preflight(self) -> None:
        # The count is read once with the app started: a probe that cannot be read (a wrong
        # query, a callable that raises, no such table) stops the run before any delivery.
        async with self.serve(Needs()) as endpoint:
            await endpoint.probe.count("acklab-preflight", "acklab-preflight")
            if endpoint.state is not None:
                await endpoint.state.read("acklab-preflight", "acklab-preflight")

    @asynccontextmanager
    async def serve(self, needs: Needs) -> AsyncIterator[Endpoint]:
        if self.app is None:
            raise TypeError("AppTarget without an app")
        if needs.socket or self.serving == "socket":
            if self._server is None:
                app = observed(self.app, self.activity)
                self._server = await asyncio.to_thread(
                    ThreadedServer(app, lifespan="auto" if self.lifespan else "off").start
                )
            host = self.host

            def transport() -> httpx.AsyncBaseTransport:
                return _Host(socket_transport(), host)

            async with self._endpoint(self._server.url, transport, socket=True) as endpoint:
                yield endpoint
            return
        if self._server is not None:
            self._parked.append(self._server)
            self._server = None
        started = await self._start(self.app)
        async with self._endpoint(self.base_url, lambda: asgi_transport(started), socket=False) as endpoint:
            yield endpoint

    async def _start(self, app: AsgiApp) -> AsgiApp:
        """`app` in this event loop, its lifespan started the first time (kept until `aclose`)."""
        if self._started is None:
            stack = AsyncExitStack()
            self._started = await stack.enter_async_context(
                running(observed(app, self.activity), lifespan=self.lifespan)
            )
            self._lifespan = stack
        return self._started

    @asynccontextmanager
    async def _endpoint(
        self, base: str, transport: Callable[[], httpx.AsyncBaseTransport], *, socket: bool
    ) -> AsyncIterator[Endpoint]:
        probe, state = self._probes(base, transport)
        deliveries = transport()
        try:
            yield Endpoint(
                base + self.path,
                deliveries,
                probe,
                socket,
                state=state,
                sinks=self.sinks,
                activity=self.activity,
            )
        finally:
            await deliveries.aclose()
            await probe.aclose()
            if state is not None:
                await state.aclose()

    async def _stop_server(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            await asyncio.to_thread(server.stop)

    async def aclose(self) -> None:
        lifespan, self._lifespan, self._started = self._lifespan, None, None
        if lifespan is not None:
            await lifespan.aclose()  # the app's shutdown, in the loop its startup ran in
            unwatch(asyncio.get_running_loop())
        servers = [*self._parked, *([self._server] if self._server is not None else [])]
        self._parked, self._server = [], None
        if servers:  # each stop waits out uvicorn's tick: all at once
            await asyncio.gather(*(asyncio.to_thread(server.stop) for server in servers))
        if self._thread is not None:
            self._thread.shutdown(wait=False)
            self._thread = None
        if self.close is not None:
            self.close()
            self.close = None


@dataclass
class SocketAppTarget(AppTarget):
    """An `AppTarget` with ``serving="socket"``: every delivery crosses a loopback socket."""

    socket_only: ClassVar[bool] = True
