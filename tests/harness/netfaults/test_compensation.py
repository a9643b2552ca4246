"""Every use of `inject` ends with the fault lifted and the link verified — even on error."""

from __future__ import annotations

import asyncio
import json
import time

import psycopg
import pytest

from acklab.harness.netfaults import (
    Down,
    FaultInUse,
    FaultProxy,
    Latency,
    LinkUnhealthy,
    ProxyEvent,
    ProxyThread,
    ResetPeer,
    Timeout,
    postgres_probe,
)
from acklab.harness.ports import free_port


class Boom(Exception):
    pass


@pytest.mark.postgres
def test_an_error_in_the_trial_still_lifts_and_verifies(proxy, connect):
    with pytest.raises(Boom), proxy.inject(Down()):
        raise Boom
    assert proxy.fault is None
    assert [e.kind for e in proxy.events] == ["started", "injected", "lifted", "healthy-verified"]
    assert connect().execute("SELECT 1").fetchone() == (1,)


@pytest.mark.postgres
def test_one_fault_at_a_time(proxy):
    with proxy.inject(Latency(ms=10)):
        with pytest.raises(FaultInUse, match="got reset_peer while latency is injected"):
            proxy.apply(ResetPeer())
        assert proxy.fault == Latency(ms=10)


@pytest.mark.postgres
def test_events_are_timestamped_in_order_and_json_ready(proxy):
    seen: list[ProxyEvent] = []
    proxy.proxy.subscribe(seen.append)
    with proxy.inject(Timeout(timeout=0)):
        pass
    records = [event.record() for event in seen]
    assert [r["kind"] for r in records] == ["injected", "lifted", "healthy-verified"]
    assert records[0]["fault"] == {"type": "timeout", "stream": "both", "attributes": {"timeout": 0}}
    assert records[2]["detail"] == "postgres_probe"
    assert [e.at for e in seen] == sorted(e.at for e in seen)
    assert records[0]["at"].endswith("Z")
    json.dumps(records)


def test_a_dead_upstream_is_reported_after_lifting_not_hidden():
    nothing_there = free_port()
    with ProxyThread(upstream=("127.0.0.1", nothing_there), probe_timeout=2) as proxy:
        with pytest.raises(LinkUnhealthy, match="did not round-trip") as caught, proxy.inject(Latency(ms=1)):
            raise Boom
        assert isinstance(caught.value.__context__, Boom)  # the trial's own error is kept, chained
        assert proxy.fault is None
        assert [e.kind for e in proxy.events][-3:] == ["lifted", "connection-closed", "health-failed"]
        assert "unreachable" in proxy.events[-2].detail


@pytest.mark.postgres
def test_the_asyncio_api_with_an_async_client(postgres_server, pg_url):
    dbname = pg_url.rsplit("/", 1)[1]

    async def scenario() -> float:
        async with FaultProxy(upstream=("127.0.0.1", postgres_server.port), probe=postgres_probe) as proxy:
            conn = await psycopg.AsyncConnection.connect(
                host="127.0.0.1",
                port=proxy.listen_port,
                user=postgres_server.user,
                password=postgres_server.password,
                dbname=dbname,
                autocommit=True,
            )
            async with conn, proxy.inject(Latency(ms=120, stream="upstream")):
                started = time.perf_counter()
                await conn.execute("SELECT 1")
                elapsed = time.perf_counter() - started
            assert [e.kind for e in proxy.events][-2:] == ["lifted", "healthy-verified"]
            return elapsed

    assert asyncio.run(scenario()) >= 0.120
