"""``--target fixture:live --checkout DIR``: the built-in fixture of another checkout, served by
processes of its own and judged from this one.

The repair flow attacks code it must not trust (a patched handler) and code it must not
mix up with its own (the head of the repository under repair). Neither is ever imported
here: each is served by ``acklab serve fixture`` started from DIR (`FixtureProcess` with
``checkout=DIR``), one process per processing delay an experiment needs, kept for the run.
The lab talks to it over a loopback socket (into the process's own network namespace, through
the sandbox's bridge) and counts effects itself, with a read-only connection to the database
the process writes. Nothing the served code does at import or request time reaches the lab's
memory; what it answers is only ever an observation.

The served code is confined (`harness.procs.confinement`): it runs in a private copy of DIR
with a scratch directory (its SQLite database lives there), under the sandbox the caller
gives (``--unsandboxed`` only when asked). Before any server starts, the lab creates the
database's schema itself from the models of `schema_from` (the expected head, in a flow;
DIR itself otherwise) and pins it (`harness.targets.schema_pin`); every count checks the pin,
and on PostgreSQL the server connects as a role with row privileges only.
"""

from __future__ import annotations

import asyncio
import dataclasses
import shutil
import tempfile
import threading
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from acklab.harness.errors import HarnessError, SpecError
from acklab.harness.procs.confinement import Confined, Confinement
from acklab.harness.procs.fixture_process import FixtureProcess
from acklab.harness.procs.leases import Lease, current_book
from acklab.harness.targets.base import Endpoint, Needs
from acklab.harness.targets.capabilities import Capabilities, Missing
from acklab.harness.targets.effects import database_kind
from acklab.harness.targets.fixture import FixtureTarget, fixture_target
from acklab.harness.targets.fixture_faults import fixture_notify, serve_as_process
from acklab.harness.targets.schema_pin import (
    PinnedSqlProbe,
    SchemaPin,
    ServedRole,
    create_schema,
    hand_over,
    models_of,
    served_role,
)
from acklab.harness.targets.state import SqlState
from acklab.harness.wire.transports import socket_transport

# One order's fulfillments (by any event or the browser return) and its status: for an order.paid
# event of its own order, the same count as its event's.
FIXTURE_EFFECTS_SQL = "SELECT count(*) FROM fulfillments WHERE order_id = :object_id"
# On SQLite the count reads the table itself, never an index (which a handler that edits
# sqlite_master can leave missing rows the table holds); PostgreSQL's probe turns index scans off.
FIXTURE_EFFECTS_SQLITE = "SELECT count(*) FROM fulfillments NOT INDEXED WHERE order_id = :object_id"
FIXTURE_STATE_SQL = "SELECT status FROM orders WHERE order_id = :object_id"
# What makes DIR a checkout of acklab whose fixture can be served.
CHECKOUT_MARKERS = ("acklab/__init__.py", "app/__init__.py", "app/cli.py", "app/runtime.py")


def check_checkout(directory: Path) -> Path:
    """`directory` resolved, or SpecError (exit 3) naming what it lacks."""
    path = Path(directory).expanduser()
    if not path.is_dir():
        raise SpecError(
            f"--checkout: got {str(directory)!r}, which is not a directory; pass an acklab checkout"
        )
    missing = [m for m in CHECKOUT_MARKERS if not (path / m).is_file()]
    if missing:
        raise SpecError(
            f"--checkout: {str(directory)!r} is not an acklab checkout (no {', '.join(missing)}); "
            "pass the root of a clone or worktree of the project"
        )
    return path.resolve()


@dataclass
class Servers:
    """The processes serving one checkout, one per (processing delay, database URL); shared by
    the copies a database-link experiment makes of the target, stopped when the run ends."""

    processes: dict[tuple[int, str], FixtureProcess] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def stop_all(self) -> None:
        with self.lock:
            processes, self.processes = list(self.processes.values()), {}
        for process in processes:
            process.stop()


@dataclass
class CheckoutTarget(FixtureTarget):
    """The fixture (``live`` or ``unsafe`` handler) of `checkout`, served confined by its own processes."""

    socket_only: ClassVar[bool] = True
    checkout: Path = field(default_factory=Path)
    confinement: Confinement | None = field(default=None, repr=False)
    # The checkout whose models the lab creates the schema from (the expected head); None: `checkout`.
    schema_from: Path | None = None
    servers: Servers = field(default_factory=Servers, repr=False, compare=False)
    _logs: Path | None = field(default=None, repr=False)
    _logs_lease: Lease | None = field(default=None, repr=False)
    _place: Confined | None = field(default=None, repr=False)
    _pin: SchemaPin | None = field(default=None, repr=False)
    _role: ServedRole | None = field(default=None, repr=False)
    _ready: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def source_dir(self) -> Path | None:
        return self.checkout / "app"

    def provision(self) -> None:
        """The private copy the checkout is served from (prepared once; `aclose` removes it)."""
        if self._place is None:
            if self.confinement is None:
                raise SpecError("--checkout: no confinement was given for the checkout's code")
            self._place = self.confinement.prepare(self.checkout, label="served")

    @property
    def place(self) -> Confined:
        """The private copy the checkout is served from (`provision` made it)."""
        if self._place is None:
            raise HarnessError("the checkout's private copy was asked for before the target was provisioned")
        return self._place

    @property
    def database_url(self) -> str:
        if self.db_url:
            return self.db_url
        return f"sqlite:///{self.place.scratch / 'fixture.db'}"

    def capabilities(self) -> Capabilities:
        return dataclasses.replace(
            super().capabilities(),
            process="hooked",
            db_link=Missing(
                "faults on the database link are not served from a checkout: the served code connects as a "
                "role of its own, on the schema the lab pinned; run them on fixture:live with --db"
            ),
        )

    @property
    def served_url(self) -> str:
        """The URL the served checkout connects with: its own role on PostgreSQL."""
        return self._role.url if self._role is not None else self.database_url

    def pinned(self) -> SchemaPin:
        """The schema created and pinned (once, before the first server starts)."""
        self.provision()
        with self._ready:
            if self._pin is None:
                place = self.place  # refused without a confinement
                if self.confinement is None:
                    raise SpecError("--checkout: no confinement was given for the checkout's code")
                doc = models_of(self.schema_from or self.checkout, self.confinement)
                fingerprint = create_schema(self.database_url, doc)
                file = None
                if self.database_url.startswith("sqlite"):
                    file = hand_over(place.scratch / "fixture.db", place)
                else:
                    self._role = served_role(self.database_url)
                self._pin = SchemaPin(fingerprint, file=file)
            return self._pin

    def schema_change(self) -> str | None:
        return self._pin.change if self._pin is not None else None

    def probe(self) -> PinnedSqlProbe:
        """A read-only count of the fixture's effects, checking the pinned schema first."""
        url = self.database_url
        query = FIXTURE_EFFECTS_SQLITE if database_kind(url) == "sqlite" else FIXTURE_EFFECTS_SQL
        return PinnedSqlProbe(url, query, self.pinned())

    def _log_dir(self) -> Path:
        if self._logs is None:
            self._logs = Path(tempfile.mkdtemp(prefix="acklab-served-"))
            self._logs_lease = current_book().acquire("directory", str(self._logs), path=str(self._logs))
        return self._logs

    def new_process(self) -> FixtureProcess:
        """A (not yet started) confined process serving the checkout on the pinned schema, told where
        the lab's sinks listen (when it runs them) as the in-process fixture is."""
        self.pinned()
        return FixtureProcess(
            handler=str(self.handler),
            database_url=self.served_url,
            secret=self.secret,
            scheme=self.scheme,
            leases=current_book(),
            log_dir=self._log_dir(),
            confined=self.place,
            notify=fixture_notify(self.sinks),
        )

    def server(self, processing_delay_ms: int) -> FixtureProcess:
        """The process serving the checkout with this processing delay (started on first use)."""
        self.provision()
        key = (processing_delay_ms, self.database_url)
        with self.servers.lock:
            process = self.servers.processes.get(key)
            if process is not None and process.running():
                return process
            process = self.new_process()
            process.start(processing_delay_ms=processing_delay_ms)
            self.servers.processes[key] = process
            return process

    async def preflight(self) -> None:
        # The schema is pinned and the first server starts here, before any trial: exit 4 if not.
        await asyncio.to_thread(self.server, 0)

    def serve(self, needs: Needs) -> AbstractAsyncContextManager[Endpoint]:
        self.provision()
        if needs.process:  # a process of its own, confined like the others, to kill and start again
            return serve_as_process(self.new_process(), self.probe(), needs, self.sinks)
        return self._serve_shared(needs)

    @asynccontextmanager
    async def _serve_shared(self, needs: Needs) -> AsyncIterator[Endpoint]:
        process = await asyncio.to_thread(self.server, needs.processing_delay_ms)
        # Read-only, and only once the pinned schema is checked: the lab reads effects, it never changes them.
        probe = self.probe()
        state = SqlState(self.database_url, FIXTURE_STATE_SQL)
        transport = socket_transport()
        try:
            yield Endpoint(
                f"{process.url}/webhooks/orders",
                transport,
                probe,
                True,
                needs.processing_delay_ms,
                state=state,
            )
        finally:
            await transport.aclose()
            await probe.aclose()
            await state.aclose()

    async def aclose(self) -> None:
        await asyncio.to_thread(self.servers.stop_all)
        if self._logs is not None:
            shutil.rmtree(self._logs, ignore_errors=True)
            self._logs = None
        if self._logs_lease is not None:
            current_book().release(self._logs_lease)
            self._logs_lease = None
        if self._role is not None:
            await asyncio.to_thread(self._role.drop)
            self._role = None
        if self._place is not None:
            self._place.close()
            self._place = None
        await super().aclose()


def checkout_target(
    ref: str,
    checkout: Path,
    *,
    db_url: str | None,
    confinement: Confinement | None = None,
    schema_from: Path | None = None,
) -> CheckoutTarget:
    """``fixture:live|fixture:unsafe[@scheme]`` served from `checkout`, confined by `confinement`."""
    root = check_checkout(checkout)
    if db_url and database_kind(db_url) == "sqlite":
        raise SpecError(
            f"--checkout with --db {db_url!r}: the served checkout's SQLite database lives in its sandbox "
            "(a fresh one per run); --db takes a PostgreSQL URL here"
        )
    base = fixture_target(ref, db_url=db_url)
    fields = {
        f.name: getattr(base, f.name)
        for f in dataclasses.fields(base)
        if f.init and not f.name.startswith("_")
    }
    # Every incident says how the served code was confined, and when its network was the host's.
    confined = f", confined: {confinement.name}" if confinement is not None else ""
    if confinement is not None and not confinement.own_network:
        confined += " (no network namespace: the host's network)"
    fields["endpoint"] = f"fixture of {root} served by its own process (uvicorn on 127.0.0.1){confined}"
    return CheckoutTarget(**fields, checkout=root, confinement=confinement, schema_from=schema_from)
