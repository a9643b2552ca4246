"""The built-in fixture served for the deeper faults: as a process of its own the lab kills and
starts again (`serve_as_process`: the crash experiments), or with its database link through a
fault proxy (`serve_behind_proxy`: the database-link faults).

A crash must kill the whole server, mid-request, the way SIGKILL or a power cut does: only a
separate process can die like that while the lab watches (`harness.procs.fixture_process`); its
effects are read straight from the database, since the process is dead part of the time. A link
fault needs a TCP link: the fixture's PostgreSQL, reached through a `harness.netfaults` proxy.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import TYPE_CHECKING

from sqlalchemy.engine import make_url

from acklab.harness.netfaults import ProxyThread, postgres_probe
from acklab.harness.procs.fixture_process import FixtureProcess
from acklab.harness.procs.leases import current_book
from acklab.harness.sinks import Sinks
from acklab.harness.targets.base import Endpoint, Needs
from acklab.harness.targets.capabilities import DbLink
from acklab.harness.targets.effects import SqlProbe
from acklab.harness.wire.transports import socket_transport

if TYPE_CHECKING:
    from acklab.harness.targets.fixture import FixtureTarget

FIXTURE_EFFECTS_SQL = "SELECT count(*) FROM fulfillments WHERE event_id = :event_id"


def fixture_notify(sinks: Sinks | None) -> dict[str, str]:
    """The fixture's settings for the lab's sinks, so a served process mails and ships as the
    in-process fixture does (`FixtureTarget.start_sinks`); nothing without them."""
    if sinks is None:
        return {}
    notify = {}
    if sinks.smtp_port is not None:
        notify["ACKLAB_SMTP_PORT"] = str(sinks.smtp_port)
    if sinks.outbound_url is not None:
        notify["ACKLAB_WAREHOUSE_URL"] = sinks.outbound_url
    return notify


@asynccontextmanager
async def serve_as_process(
    process: FixtureProcess, probe: SqlProbe, needs: Needs, sinks: Sinks | None
) -> AsyncIterator[Endpoint]:
    """Serve the fixture as `process` (``acklab serve fixture`` on a fixed loopback port), started
    here and stopped after: the endpoint carries it, to kill and start again; `probe` reads the
    database it writes."""
    await asyncio.to_thread(process.start)
    transport = socket_transport()
    try:
        yield Endpoint(
            url=f"{process.url}/webhooks/orders",
            transport=transport,
            probe=probe,
            socket=True,
            processing_delay_ms=needs.processing_delay_ms,
            sinks=sinks,
            process=process,
            hooked=process,
        )
    finally:
        await transport.aclose()
        await probe.aclose()
        await asyncio.to_thread(process.stop)


def via_proxy(url: str, port: int) -> str:
    """``url`` with its host and port replaced by the proxy's loopback address."""
    return make_url(url).set(host="127.0.0.1", port=port).render_as_string(hide_password=False)


@asynccontextmanager
async def serve_behind_proxy(
    target: FixtureTarget,
    needs: Needs,
    serve: Callable[[FixtureTarget, Needs], AbstractAsyncContextManager[Endpoint]],
) -> AsyncIterator[Endpoint]:
    """Serve `target` (with `serve`) on its database URL pointed at a fresh fault proxy; effects are
    read from the real database, past the proxy."""
    real_url = target.database_url
    parsed = make_url(real_url)
    proxy = ProxyThread(
        (parsed.host or "127.0.0.1", parsed.port or 5432), probe=postgres_probe, name=f"db-link:{target.name}"
    )
    await asyncio.to_thread(proxy.start)
    leases = current_book()
    lease = leases.acquire(
        "proxy", str(proxy.listen_port), port=proxy.listen_port, upstream=f"{parsed.host}:{parsed.port}"
    )
    probe = SqlProbe(real_url, FIXTURE_EFFECTS_SQL)
    try:
        # A copy of its own, never kept warm: its app opens connections through this proxy only.
        proxied = dataclasses.replace(target, db_url=via_proxy(real_url, proxy.listen_port), keep_warm=False)
        async with serve(proxied, dataclasses.replace(needs, db_link=False)) as served:
            yield dataclasses.replace(served, probe=probe, db_link=DbLink(proxy, real_url))
    finally:
        await probe.aclose()
        await asyncio.to_thread(proxy.stop)
        leases.release(lease)
