"""Shared fixtures: a private PostgreSQL server for the whole run, a fresh database per test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from harness.pgtemp import PostgresServer, start_postgres


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    server = start_postgres()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def pg_url(postgres_server: PostgresServer) -> str:
    """The URL of a fresh, empty PostgreSQL database of its own (psycopg 3 driver)."""
    return postgres_server.create_database()
