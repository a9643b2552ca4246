"""The built-in targets ``fixture:live`` and ``fixture:unsafe``: the webhook fixture in ``app/``.

The only harness module that imports ``app``. The lab starts the fixture itself, on a
temporary SQLite database (or on ``--db URL``), in-process over ASGI where that is
faithful and on a real uvicorn socket where an experiment needs one (concurrency,
timeouts, resets). The app is made once per run and kept warm, as a deployed service is
between two webhooks: one instance, its lifespan started once, for every experiment served
in-process, and one uvicorn server for those that need a socket, started for the first and
kept until the run ends (after the end-of-run re-read); the timeout-overlap experiment's
instance, with the lab-only ``processing_delay_ms`` set, is another app and server on the same
database. The lab watches what each is still doing (`harness.targets.activity`), so a count
settles as soon as the fixture is idle.
"""

from __future__ import annotations

import asyncio
import base64
import secrets
import shutil
import tempfile
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar, Literal

import acklab.app as fixture_package
from acklab.app.errors import ConfigError, FixtureError
from acklab.app.main import create_app
from acklab.app.notify import SHIPMENTS_PATH
from acklab.app.runtime import HANDLER_MODULES
from acklab.app.schemes import SCHEMES as APP_SCHEMES
from acklab.app.settings import Settings
from acklab.evidence.redaction import remember
from acklab.harness.errors import HarnessError, SpecError
from acklab.harness.ports import free_port
from acklab.harness.procs.fixture_process import FixtureProcess
from acklab.harness.procs.leases import Lease, current_book
from acklab.harness.sinks import Sinks, sink_configs
from acklab.harness.specs.credentials import redact, url_secrets
from acklab.harness.specs.target import OutboundAnswer, OutboundEffects, OutboundRoute, SmtpEffects
from acklab.harness.targets.activity import Activity, observed, unwatch
from acklab.harness.targets.asgi import running
from acklab.harness.targets.base import Endpoint, Expect, Needs, Target
from acklab.harness.targets.capabilities import Capabilities, Missing
from acklab.harness.targets.effects import HttpProbe, SqlProbe, database_kind
from acklab.harness.targets.fixture_faults import (
    FIXTURE_EFFECTS_SQL,
    fixture_notify,
    serve_as_process,
    serve_behind_proxy,
)
from acklab.harness.targets.objects import (
    Competitor,
    LifecycleEvent,
    ObjectEvents,
    ObjectReads,
    SiblingEvent,
)
from acklab.harness.targets.provenance import file_sha256
from acklab.harness.targets.server import ThreadedServer
from acklab.harness.targets.state import HttpState
from acklab.harness.wire.providers import PROVIDERS, profile
from acklab.harness.wire.transports import asgi_transport, socket_transport

HANDLERS = ("live", "unsafe")
# The schemes the fixture verifies: its own list (app imports nothing of the lab), each one a
# provider record's (tests/test_provider_records.py checks it).
FIXTURE_SCHEMES = tuple(name for name in PROVIDERS if name in APP_SCHEMES)
IN_PROCESS = "http://fixture.acklab"
FIXTURE_TEMPLATE = {
    "id": "{{event_id}}",
    "type": "order.paid",
    "timestamp": "{{timestamp}}",
    # Drawn per event from the seed (harness.wire.variation): no patch can single out the lab's orders.
    "data": {"order_id": "{{order_id}}", "amount_cents": "{{amount_cents}}", "currency": "{{currency}}"},
}
FIXTURE_CONFLICT = {"data.amount_cents": 9900}
# Beyond one event: the fixture's order lifecycle, the payment provider's sibling of order.paid,
# and the customer's browser returning from checkout (app/webhooks.py keeps them, app/unsafe.py
# breaks all three). Its probes read one order: fulfillments by anyone, and its status.
FIXTURE_OBJECTS = ObjectEvents(
    object="{{order_id}}",
    lifecycle=(
        LifecycleEvent("order.created", "created"),
        LifecycleEvent("order.paid", "paid"),
        LifecycleEvent("order.refunded", "refunded"),
    ),
    siblings=(SiblingEvent("payment.succeeded"),),
    competitor=Competitor(
        method="POST",
        url="/checkout/{{order_id}}/complete",
        body={"order_id": "{{order_id}}", "amount_cents": 1200, "currency": "EUR"},
    ),
)
ORDER_PROBE = "/orders/{{object_id}}/effects"
# The rows a sink reads when an email or call arrives: the order's fulfillments, as ORDER_PROBE counts.
FULFILLMENTS_QUERY = "SELECT count(*) FROM fulfillments WHERE order_id = :object_id"


def new_secret() -> str:
    """A fresh Standard Webhooks secret (whsec_ + base64 of 24 random bytes) for one run."""
    return "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode()


@dataclass
class FixtureTarget(Target):
    """The webhook fixture with the `handler` under test (``live`` or ``unsafe``)."""

    db_url: str | None = None
    http2_refusal: ClassVar[str | None] = "the fixture is served by uvicorn, which speaks HTTP/1.1 only"
    varies: ClassVar[bool] = True
    _tmpdir: Path | None = field(default=None, repr=False)
    _lease: Lease | None = field(default=None, repr=False)
    # The lab's SMTP and warehouse sinks (`start_sinks`); None: the fixture tells nobody (as before).
    sinks: Sinks | None = field(default=None, repr=False)
    # What the sinks read the fulfilments with as a message arrives: its engine is closed with the
    # run (`aclose`), after the sinks that use it. A copy shares the original's sinks, never owns them.
    _sink_rows: SqlProbe | None = field(default=None, init=False, repr=False)
    # One app for the run, kept warm (off: an app per serve, as a copy pointed at a fault proxy
    # on the database link is served — it is never closed itself).
    keep_warm: bool = True
    activity: Activity = field(default_factory=Activity, repr=False)
    # Kept warm for the run, by processing delay: the apps, their uvicorn servers, and the one
    # started in this event loop (its lifespan entered). A copy (dataclasses.replace) starts empty.
    _apps: dict[int, Any] = field(default_factory=dict, init=False, repr=False)
    _servers: dict[int, ThreadedServer] = field(default_factory=dict, init=False, repr=False)
    _started: Any = field(default=None, init=False, repr=False)
    _lifespan: AsyncExitStack | None = field(default=None, init=False, repr=False)

    @property
    def ephemeral_effects(self) -> bool:
        """Without --db the fixture's SQLite database is a temporary file of this process."""
        return not self.db_url

    def provision(self) -> None:
        """Without --db: a temporary directory for the fixture's SQLite database (leased, removed
        by `aclose`); once."""
        if self.db_url or self._tmpdir is not None:
            return
        self._own_directory()

    def _own_directory(self) -> Path:
        """The fixture's temporary directory (its SQLite database, its processes' logs), made and
        leased on first use, removed by `aclose`: with --db, only a run that starts a process has one."""
        if self._tmpdir is None:
            self._tmpdir = Path(tempfile.mkdtemp(prefix="acklab-fixture-"))
            self._lease = current_book().acquire("directory", str(self._tmpdir), path=str(self._tmpdir))
        return self._tmpdir

    @property
    def database_url(self) -> str:
        """The fixture's database (--db, else the SQLite file `provision` made room for)."""
        if self.db_url:
            return self.db_url
        if self._tmpdir is None:
            raise HarnessError("the fixture's database was asked for before the fixture was provisioned")
        return f"sqlite:///{self._tmpdir / 'fixture.db'}"

    def capabilities(self) -> Capabilities:
        # The fixture runs as a process of the lab's on request, and takes its hooks (a crash
        # after the commit, work inside the transaction); its link to PostgreSQL is TCP.
        link: Literal["tcp"] | Missing = (
            "tcp"
            if self.database == "postgresql" and self.db_url
            else Missing(
                f"the fixture's database is {self.database!r}, and faults on the database link need a TCP "
                "link: pass --db postgresql+psycopg://user@127.0.0.1:5432/db"
            )
        )
        return replace(super().capabilities(), process="hooked", db_link=link)

    def new_process(self) -> FixtureProcess:
        """A (not yet started) process serving this fixture on its database, telling the lab's sinks."""
        self.provision()
        logs = self._own_directory() / "logs"
        logs.mkdir(exist_ok=True)
        return FixtureProcess(
            handler=str(self.handler),
            database_url=self.database_url,
            secret=self.secret,
            scheme=self.scheme,
            leases=current_book(),
            log_dir=logs,  # removed with the run, as the database is: nothing left in /tmp
            notify=fixture_notify(self.sinks),
        )

    def start_sinks(self) -> Sinks:
        """Run the lab's SMTP sink and a warehouse API sink for the fixture's fulfilments
        (`acklab.app.notify`), counted beside its fulfillments (``acklab demo``); once."""
        self.provision()
        if self.sinks is None:
            configs = sink_configs(
                {
                    "smtp": SmtpEffects(listen=f"127.0.0.1:{free_port()}", match="{{order_id}}"),
                    "outbound": OutboundEffects(
                        listen=f"127.0.0.1:{free_port()}",
                        idempotency_header="Idempotency-Key",
                        routes=(
                            OutboundRoute(
                                path=SHIPMENTS_PATH,
                                match="{{order_id}}",
                                respond=OutboundAnswer(status=201, json={"shipment": "sh_{{seq}}"}),
                            ),
                        ),
                    ),
                }
            )
            self._sink_rows = rows = SqlProbe(self.database_url, FULFILLMENTS_QUERY)
            self.sinks = Sinks(configs, rows_now=rows.count_now)
            self.sinks.start()
        return self.sinks

    def sinks_of(self) -> Sinks | None:
        return self.sinks

    def _app(self, processing_delay_ms: int) -> Any:
        sinks = self.sinks
        try:
            settings = Settings(
                database_url=self.database_url,
                handler=self.handler,  # type: ignore[arg-type]
                scheme=self.scheme,
                secret=self.secret,  # type: ignore[arg-type]
                processing_delay_ms=processing_delay_ms,
                smtp_port=sinks.smtp_port if sinks is not None else None,
                warehouse_url=sinks.outbound_url if sinks is not None else None,
            )
            return create_app(settings)
        except FixtureError as exc:
            # The fixture names the URL it was given, password and all: the message reaches
            # records and stderr redacted, and the original is not chained into tracebacks.
            error = SpecError if isinstance(exc, ConfigError) else HarnessError  # exit 3, else 4
            raise error(f"the fixture could not start: {redact(str(exc))}") from None

    def database_urls(self) -> tuple[str, ...]:
        return (self.db_url,) if self.db_url else ()

    def object_reads(self) -> ObjectReads:
        return ObjectReads(count=True, state=True)

    def source_dir(self) -> Path | None:
        # The checkout holding the app package that is imported, i.e. the handler that runs.
        where = fixture_package.__file__
        return Path(where).resolve().parent if where else None

    def handler_sha256(self) -> str | None:
        # The handler module of the checkout whose fixture serves (`source_dir`): this
        # process's own for the built-in fixture, another checkout's for `--checkout DIR`.
        source = self.source_dir()
        module = HANDLER_MODULES[self.handler or "live"].rsplit(".", 1)[-1]
        return file_sha256(source / f"{module}.py") if source is not None else None

    async def preflight(self) -> None:
        await asyncio.to_thread(self.provision)
        await self._app_for(0)  # a fixture that cannot start stops the run before any delivery

    async def _app_for(self, processing_delay_ms: int) -> Any:
        if processing_delay_ms not in self._apps:
            self._apps[processing_delay_ms] = await asyncio.to_thread(self._app, processing_delay_ms)
        return self._apps[processing_delay_ms]

    def serve(self, needs: Needs) -> AbstractAsyncContextManager[Endpoint]:
        self.provision()
        if needs.db_link:
            return serve_behind_proxy(self, needs, type(self).serve)
        if needs.process:
            probe = SqlProbe(self.database_url, FIXTURE_EFFECTS_SQL)
            return serve_as_process(self.new_process(), probe, needs, self.sinks)
        return self._serve(needs)

    @asynccontextmanager
    async def _serve(self, needs: Needs) -> AsyncIterator[Endpoint]:
        delay = needs.processing_delay_ms
        socket = needs.socket or bool(delay)
        async with self._instance(delay, socket=socket) as (base, started):
            if started is None:  # over uvicorn's socket
                probe = HttpProbe(base + ORDER_PROBE, "count", transport=socket_transport(), source="fixture")
                state = HttpState(base + ORDER_PROBE, "status", transport=socket_transport())
                transport = socket_transport()
            else:
                probe = HttpProbe(
                    base + ORDER_PROBE, "count", transport=asgi_transport(started), source="fixture"
                )
                state = HttpState(base + ORDER_PROBE, "status", transport=asgi_transport(started))
                transport = asgi_transport(started)
            try:
                yield Endpoint(
                    f"{base}/webhooks/orders",
                    transport,
                    probe,
                    socket,
                    delay,
                    state=state,
                    sinks=self.sinks,
                    activity=self.activity,
                )
            finally:
                await transport.aclose()
                await probe.aclose()
                await state.aclose()

    @asynccontextmanager
    async def _instance(self, delay: int, *, socket: bool) -> AsyncIterator[tuple[str, Any]]:
        """(base URL, the app started in this event loop — None over a socket): the warm one, or
        one made for this serve alone and let go after it (`keep_warm` off)."""
        if self.keep_warm:
            app = await self._app_for(delay)
            if socket:
                if delay not in self._servers:
                    server = ThreadedServer(observed(app, self.activity))
                    self._servers[delay] = await asyncio.to_thread(server.start)
                yield self._servers[delay].url, None
                return
            if self._started is None:
                stack = AsyncExitStack()
                self._started = await stack.enter_async_context(running(observed(app, self.activity)))
                self._lifespan = stack
            yield IN_PROCESS, self._started
            return
        app = await asyncio.to_thread(self._app, delay)
        if socket:
            server = await asyncio.to_thread(ThreadedServer(observed(app, self.activity)).start)
            try:
                yield server.url, None
            finally:
                await asyncio.to_thread(server.stop)
            return
        async with running(observed(app, self.activity)) as started:
            yield IN_PROCESS, started

    async def aclose(self) -> None:
        lifespan, self._lifespan, self._started = self._lifespan, None, None
        if lifespan is not None:
            await lifespan.aclose()  # the fixture's shutdown, in the loop its startup ran in
            unwatch(asyncio.get_running_loop())
        servers, self._servers = list(self._servers.values()), {}
        if servers:  # each stop waits out uvicorn's tick: all at once
            await asyncio.gather(*(asyncio.to_thread(server.stop) for server in servers))
        apps, self._apps = list(self._apps.values()), {}
        for app in apps:
            app.state.fixture.engine.dispose()
        if self.sinks is not None:
            await asyncio.to_thread(self.sinks.stop)
        rows, self._sink_rows = self._sink_rows, None
        if rows is not None:  # else its pooled connections stay open until the garbage collector finds them
            await rows.aclose()
        if self._tmpdir is not None:
            shutil.rmtree(self._tmpdir, ignore_errors=True)
            self._tmpdir = None
        if self._lease is not None:
            current_book().release(self._lease)
            self._lease = None


def fixture_target(ref: str, *, db_url: str | None) -> FixtureTarget:
    """``fixture:live`` / ``fixture:unsafe`` (optionally ``@<scheme>``, e.g. ``fixture:live@stripe``)."""
    spec = ref.removeprefix("fixture:")
    handler, _, scheme = spec.partition("@")
    scheme = scheme or "standard"
    if handler not in HANDLERS:
        raise SpecError(f"--target: got {ref!r}; expected fixture:live, fixture:unsafe or a target spec file")
    if scheme not in FIXTURE_SCHEMES:
        raise SpecError(
            f"--target: got scheme {scheme!r} in {ref!r}; the fixture signs with one of {', '.join(FIXTURE_SCHEMES)}"
        )
    remember(*url_secrets(db_url))  # a --db password: redacted in every message from now on
    return FixtureTarget(
        name=f"fixture:{handler}" + (f"@{scheme}" if scheme != "standard" else ""),
        kind="fixture",
        handler=handler,
        endpoint="fixture /webhooks/orders (in-process ASGI; uvicorn on 127.0.0.1 where a socket is needed)",
        database=database_kind(db_url) if db_url else "sqlite",
        scheme=scheme,
        secret=new_secret(),
        timeout_s=profile(scheme).timeout_s,
        template=FIXTURE_TEMPLATE,
        conflict_set=FIXTURE_CONFLICT,
        expect=Expect(),
        can_delay=True,
        db_url=db_url,
        objects=FIXTURE_OBJECTS,
    )
