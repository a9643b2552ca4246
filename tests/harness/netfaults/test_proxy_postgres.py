"""Each fault on a real link: psycopg -> fault proxy -> the private PostgreSQL.

Timing assertions are lower bounds only (the fault must add at least what it claims); an
upper bound would make the suite flaky on a loaded machine.
"""

from __future__ import annotations

import hashlib
import socket
import struct
import time

import psycopg
import pytest

from acklab.harness.netfaults import faults

pytestmark = pytest.mark.postgres

BIG = "SELECT string_agg(md5(i::text), '') FROM generate_series(1, {n}) AS i"


def expected_big(n: int) -> str:
    return "".join(hashlib.md5(str(i).encode()).hexdigest() for i in range(1, n + 1))


def roundtrip_s(conn: psycopg.Connection) -> float:
    started = time.perf_counter()
    assert conn.execute("SELECT 1").fetchone() == (1,)
    return time.perf_counter() - started


def kinds(proxy) -> list[str]:
    return [event.kind for event in proxy.events]


def test_without_a_fault_the_proxy_is_transparent(proxy, connect):
    conn = connect()
    assert conn.execute(BIG.format(n=500)).fetchone() == (expected_big(500),)
    assert kinds(proxy) == ["started"]


def test_latency_adds_at_least_the_injected_delay_per_direction(proxy, connect):
    conn = connect()
    with proxy.inject(faults.Latency(ms=150, stream="both")):
        # One query is one chunk up and one chunk down: each waits 150 ms.
        assert roundtrip_s(conn) >= 0.300
    with proxy.inject(faults.Latency(ms=200, jitter=50)):
        assert roundtrip_s(conn) >= 0.150  # downstream only, ms - jitter at the least
    assert kinds(proxy)[1:] == ["injected", "lifted", "healthy-verified"] * 2


def test_latency_applies_to_new_connections_too(proxy, connect):
    with proxy.inject(faults.Latency(ms=100)):
        started = time.perf_counter()
        conn = connect()  # the startup exchange takes several downstream chunks
        assert time.perf_counter() - started >= 0.100
        assert roundtrip_s(conn) >= 0.100


def test_reset_peer_fails_the_query_with_a_connection_error(proxy, connect):
    conn = connect()
    with proxy.inject(faults.ResetPeer(timeout=0)), pytest.raises(psycopg.OperationalError):
        conn.execute("SELECT 1")
    assert conn.closed
    assert "connection-reset" in kinds(proxy)
    assert connect().execute("SELECT 2").fetchone() == (2,)


def test_reset_peer_sends_a_real_rst(proxy):
    with (
        socket.create_connection(("127.0.0.1", proxy.listen_port), timeout=5) as sock,
        proxy.inject(faults.ResetPeer()),
    ):
        sock.sendall(struct.pack("!ii", 8, 80877103))  # SSLRequest: the server answers one byte
        with pytest.raises(ConnectionResetError):
            sock.recv(1)  # a FIN would read b"", only an RST raises


def test_reset_peer_downstream_loses_the_answer_to_a_commit_that_happened(proxy, connect):
    conn = connect()
    conn.execute("CREATE TABLE marks (id int)")
    with proxy.inject(faults.ResetPeer(stream="downstream")), pytest.raises(psycopg.OperationalError):
        conn.execute("INSERT INTO marks VALUES (1)")
    assert connect().execute("SELECT count(*) FROM marks").fetchone() == (1,)  # committed, never acknowledged


def test_reset_peer_upstream_stops_the_request_before_the_server(proxy, connect):
    conn = connect()
    conn.execute("CREATE TABLE marks (id int)")
    with proxy.inject(faults.ResetPeer(stream="upstream")), pytest.raises(psycopg.OperationalError):
        conn.execute("INSERT INTO marks VALUES (1)")
    assert connect().execute("SELECT count(*) FROM marks").fetchone() == (0,)


def test_reset_peer_waits_its_timeout_after_the_first_chunk(proxy, connect):
    conn = connect()
    with proxy.inject(faults.ResetPeer(timeout=300)):
        started = time.perf_counter()
        with pytest.raises(psycopg.OperationalError):
            conn.execute("SELECT 1")
        assert time.perf_counter() - started >= 0.3


def test_timeout_closes_an_open_connection_after_its_timeout(proxy, connect):
    conn = connect()
    with proxy.inject(faults.Timeout(timeout=400)):
        started = time.perf_counter()
        with pytest.raises(psycopg.OperationalError):
            conn.execute("SELECT 1")  # dropped on the floor until the proxy closes the link
        assert time.perf_counter() - started >= 0.3
    assert connect().execute("SELECT 3").fetchone() == (3,)


def test_a_blackhole_without_timeout_leaves_the_client_to_time_out(proxy, connect):
    with proxy.inject(faults.Timeout(timeout=0)):
        started = time.perf_counter()
        with pytest.raises(psycopg.OperationalError):
            connect(connect_timeout=2)  # libpq's smallest connect timeout
        assert time.perf_counter() - started >= 1.9
    assert connect().execute("SELECT 4").fetchone() == (4,)


def test_lifting_a_blackhole_closes_the_connections_it_held(proxy, connect):
    conn = connect()
    with proxy.inject(faults.Timeout(timeout=0)):
        pass
    with pytest.raises(psycopg.OperationalError):
        conn.execute("SELECT 1")
    assert connect().execute("SELECT 1").fetchone() == (1,)


def test_a_blackhole_on_the_server_side_outlives_the_statement_timeout(proxy, connect, postgres_server):
    """Downstream only: the server runs the statement, the client never hears; its own timeout ends it."""
    conn = connect()
    conn.execute("CREATE TABLE marks (id int)")
    with (
        proxy.inject(faults.Timeout(timeout=600, stream="downstream")),
        pytest.raises(psycopg.OperationalError),
    ):
        conn.execute("INSERT INTO marks VALUES (1)")
    check = connect()
    assert check.execute("SELECT count(*) FROM marks").fetchone() == (1,)  # committed, never acknowledged


def test_down_refuses_new_connections_and_closes_open_ones(proxy, connect):
    conn = connect()
    port = proxy.listen_port
    with proxy.inject(faults.Down()):
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
        with pytest.raises(psycopg.OperationalError):
            connect()
        with pytest.raises(psycopg.OperationalError):
            conn.execute("SELECT 1")
    assert proxy.listen_port == port  # back on the same port, so URLs stay valid
    assert connect().execute("SELECT 5").fetchone() == (5,)


def test_limit_data_cuts_the_connection_after_the_limit(proxy, connect):
    conn = connect()
    with proxy.inject(faults.LimitData(bytes=2000)):
        assert conn.execute("SELECT 1").fetchone() == (1,)  # well under the limit
        with pytest.raises(psycopg.OperationalError):
            conn.execute(BIG.format(n=1000))  # 32 kB of answer
    assert "connection-closed" in kinds(proxy)


def test_slicer_delivers_the_same_answer_in_small_pieces(proxy, connect):
    with proxy.inject(faults.Slicer(average_size=7, size_variation=3, delay=50, stream="both")):
        conn = connect()
        assert conn.execute(BIG.format(n=150)).fetchone() == (expected_big(150),)


def test_bandwidth_delivers_the_same_answer_slowly(proxy, connect):
    conn = connect()
    with proxy.inject(faults.Bandwidth(rate=64)):
        started = time.perf_counter()
        assert conn.execute(BIG.format(n=1000)).fetchone() == (expected_big(1000),)
        assert time.perf_counter() - started >= 32_000 / 64_000 * 0.9


def test_slow_close_holds_the_servers_close(proxy):
    def rejected_after() -> float:
        """Speak a protocol version the server refuses: it answers an error and closes at once."""
        with socket.create_connection(("127.0.0.1", proxy.listen_port), timeout=5) as sock:
            started = time.perf_counter()
            sock.sendall(struct.pack("!ii", 8, 0x00090000))
            while sock.recv(4096):
                pass
            return time.perf_counter() - started

    with proxy.inject(faults.SlowClose(delay=400)):
        assert rejected_after() >= 0.400
