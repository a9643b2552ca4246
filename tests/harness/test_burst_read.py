"""A burst is released only once the peers on this machine have read their partial requests.

Acknowledged is not read: a sandbox's bridge (or a loaded server) holds the bytes in a socket
the kernel acknowledged for. `peer_unread` reads each peer's receive queue from /proc/net/tcp;
`wait_read` waits for it to empty, or to stop emptying (a server that reads one connection at
a time never empties all of them, and the burst still goes).
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time

from acklab.harness.wire.burst_socket import peer_unread, proc_address, wait_read


def test_proc_addresses_are_spelled_as_the_kernel_spells_them():
    # /proc/net/tcp prints each 32-bit word of the address in the machine's byte order.
    expected = "0100007F" if socket.htonl(1) != 1 else "7F000001"
    assert proc_address("127.0.0.1", 8080, socket.AF_INET) == f"{expected}:1F90"
    assert proc_address("::1", 1, socket.AF_INET6).endswith(":0001")
    assert len(proc_address("::1", 1, socket.AF_INET6)) == 32 + 5


def _server() -> socket.socket:
    return socket.create_server(("127.0.0.1", 0), backlog=64)


async def _connected(port: int, n: int, payload: bytes) -> list[asyncio.StreamWriter]:
    writers = []
    for _ in range(n):
        _reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(payload)
        await writer.drain()
        writers.append(writer)
    return writers


def test_what_a_peer_has_not_read_is_seen_and_so_is_its_reading():
    async def go() -> tuple[dict[int, int], dict[int, int], dict[int, int]]:
        server = _server()
        writers = await _connected(server.getsockname()[1], 3, b"x" * 100)
        try:
            await asyncio.sleep(0.05)
            before = peer_unread(writers)  # none accepted yet: each waits in the backlog, unread
            accepted = [server.accept()[0] for _ in writers]
            accepted[1].recv(1000)
            after_one = peer_unread(writers)
            for conn in (accepted[0], accepted[2]):
                conn.recv(1000)
            after_all = peer_unread(writers)
            for conn in accepted:
                conn.close()
            return before, after_one, after_all
        finally:
            for w in writers:
                w.close()
            server.close()

    before, after_one, after_all = asyncio.run(go())
    assert before == {0: 100, 1: 100, 2: 100}
    assert after_one == {0: 100, 1: 0, 2: 100}
    assert after_all == {0: 0, 1: 0, 2: 0}


def test_the_release_waits_for_a_reader_still_reading_and_not_forever_for_one_that_stopped():
    settle = 0.5

    async def go() -> tuple[float, float, dict[int, int]]:
        server = _server()
        writers = await _connected(server.getsockname()[1], 4, b"y" * 50)
        try:
            accepted = [server.accept()[0] for _ in writers]
            read_at: list[float] = []

            def read_one_at_a_time() -> None:
                # As a bridge hands connections in: one after another, each within the settle, all
                # of them over longer than it (0.8 s against 0.5 s): a fixed pause of the settle
                # would release before the last read; only waiting on the reads releases after it.
                for conn in accepted:
                    time.sleep(0.2)
                    conn.recv(1000)
                read_at.append(time.monotonic())

            reader = threading.Thread(target=read_one_at_a_time)
            reader.start()
            await wait_read(writers, timeout_s=30, settle_s=settle)
            waited_until = time.monotonic()
            reader.join()
            # A peer that never reads: the wait ends once nothing moved for the settle, not at the timeout.
            writers[0].write(b"more")
            await writers[0].drain()
            started = time.monotonic()
            await wait_read(writers, timeout_s=30, settle_s=settle)
            gave_up_after = time.monotonic() - started
            left = peer_unread(writers)
            for conn in accepted:
                conn.close()
            return waited_until - read_at[0], gave_up_after, left
        finally:
            for w in writers:
                w.close()
            server.close()

    after_reads, gave_up_after, left = asyncio.run(go())
    assert after_reads >= settle * 0.9  # released only once the peer had read everything, and a settle after
    assert gave_up_after < 10  # not the 30 s timeout
    assert left[0] == 4
    assert left[1] == 0
