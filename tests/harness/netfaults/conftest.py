"""A fault proxy in front of the private PostgreSQL, and psycopg connections through it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

from acklab.harness.netfaults import ProxyThread, postgres_probe
from acklab.harness.procs.pgtemp import PostgresServer

Connect = Callable[..., psycopg.Connection]


@pytest.fixture
def proxy(postgres_server: PostgresServer) -> Iterator[ProxyThread]:
    with ProxyThread(upstream=("127.0.0.1", postgres_server.port), probe=postgres_probe) as running:
        yield running
    assert running.fault is None, "a test left a fault injected"


@pytest.fixture
def connect(proxy: ProxyThread, pg_url: str, postgres_server: PostgresServer) -> Iterator[Connect]:
    """Open psycopg connections through the proxy (to the test's own database); all closed after."""
    dbname = pg_url.rsplit("/", 1)[1]
    opened: list[psycopg.Connection] = []

    def _connect(**kwargs: Any) -> psycopg.Connection:
        options: dict[str, Any] = {"connect_timeout": 5, "autocommit": True, **kwargs}
        conn = psycopg.connect(
            host="127.0.0.1",
            port=proxy.listen_port,
            user=postgres_server.user,
            password=postgres_server.password,
            dbname=dbname,
            **options,
        )
        opened.append(conn)
        return conn

    yield _connect
    for conn in opened:
        conn.close()
