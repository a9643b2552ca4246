"""A burst's connections never overflow a short accept queue.

Sixteen handshakes at once against the standard library's socketserver (backlog 5) overflowed its
accept queue: the kernel dropped those past it and the lab sent them again a second later, so a
burst's arming took 0.1 s or 1.2 s by luck. `H1Burst.arm` opens the connections four at a time,
each four once the listener's accept queue has room (`accept_room`: its backlog and queue, asked
of the kernel's sock_diag netlink).
"""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx

from acklab.harness.wire import burst_h1
from acklab.harness.wire.burst_h1 import H1Burst
from acklab.harness.wire.burst_socket import accept_room, listening, wait_for_room


def _queued_connections(listener: socket.socket, n: int) -> list[socket.socket]:
    port = listener.getsockname()[1]
    return [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(n)]


def test_a_listeners_queue_and_backlog_come_from_the_kernel():
    with socket.create_server(("127.0.0.1", 0), backlog=16) as listener:
        port = listener.getsockname()[1]
        assert listening(port) == [(0, 16)]
        clients = _queued_connections(listener, 3)
        try:
            assert listening(port) == [(3, 16)]
            assert accept_room(port) == 16 + 1 - 3  # the kernel queues one past the backlog
            accepted, _ = listener.accept()
            accepted.close()
            assert accept_room(port) == 15
        finally:
            for c in clients:
                c.close()
    assert listening(port) == []
    assert accept_room(port) is None, "nobody listens on the port any more"


def test_waiting_for_room_returns_at_once_when_there_is_room_or_no_listener_here():
    with socket.create_server(("127.0.0.1", 0), backlog=5) as listener:
        port = listener.getsockname()[1]
        clients = _queued_connections(listener, 2)  # 6 - 2: room for four
        try:
            started = time.monotonic()
            asyncio.run(wait_for_room(port, 4, time.monotonic() + 30, settle_s=10))
            assert time.monotonic() - started < 5, "room for four: no wait for the settle"
        finally:
            for c in clients:
                c.close()
    started = time.monotonic()
    asyncio.run(wait_for_room(port, 4, time.monotonic() + 30, settle_s=10))
    assert time.monotonic() - started < 5, "no listener here: nothing to wait for"


def test_waiting_for_room_lasts_while_the_server_accepts_and_ends_when_it_stops():
    with socket.create_server(("127.0.0.1", 0), backlog=5) as listener:
        port = listener.getsockname()[1]
        clients = _queued_connections(listener, 6)  # full: the kernel takes backlog + 1
        assert accept_room(port) == 0
        taken: list[socket.socket] = []
        accepted_at: list[float] = []

        def accept_three() -> None:  # slowly, then no more: a server stuck on its third request
            for _ in range(3):
                time.sleep(0.2)
                taken.append(listener.accept()[0])
                accepted_at.append(time.monotonic())

        acceptor = threading.Thread(target=accept_three)
        started = time.monotonic()
        acceptor.start()
        try:
            asyncio.run(wait_for_room(port, 4, time.monotonic() + 30, settle_s=1.0))
            returned = time.monotonic()
            acceptor.join()
            # Room for four never came (three were taken): it waited through the accepts, each
            # within its settle, then the settle after the last one, and went on.
            assert len(accepted_at) == 3
            assert returned >= accepted_at[-1] + 1.0, (started, accepted_at, returned)
            assert accept_room(port) == 3
        finally:
            for c in clients + taken:
                c.close()


class _Hook(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def retransmitted(wire: object) -> int:
    """Segments the kernel sent again on the wire's connection, its handshake included
    (tcp_info's tcpi_total_retrans: a dropped SYN is sent again a second later)."""
    raw = wire.writer.get_extra_info("socket")  # type: ignore[attr-defined]
    info = raw.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 104)
    return int(struct.unpack_from("I", info, 100)[0])


def test_a_burst_of_sixteen_against_a_socketserver_backlog_loses_no_handshake(monkeypatch):
    # A loaded machine may starve the server's accept loop for longer than the lab waits for it
    # by default (then it goes on, and the kernel's queue is the server's business): here it waits.
    monkeypatch.setattr(burst_h1, "ACCEPT_SETTLE_S", 5.0)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Hook)
    assert server.request_queue_size == 5  # the standard library's own
    port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()

    async def burst() -> tuple[list[int], int]:
        requests = [httpx.Request("POST", f"http://127.0.0.1:{port}/hook", content=b"{}") for _ in range(16)]
        armed = await H1Burst.arm(requests, timeout_s=30)
        try:
            again = sum(retransmitted(w) for w in armed.wires)
            armed.release()
            answers = [await w.response(r, 10) for w, r in zip(armed.wires, requests, strict=True)]
            return [a.status_code for a in answers], again
        finally:
            await armed.aclose()

    try:
        statuses, again = asyncio.run(burst())
    finally:
        server.shutdown()
        server.server_close()
    assert statuses == [200] * 16
    assert again == 0, f"{again} segment(s) sent again: a handshake was dropped"
