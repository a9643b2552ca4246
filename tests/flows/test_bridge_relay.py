"""The bridge's relay loop (`bridge_script.Relays`), in this process, on socket pairs.

One loop copies every relayed pair's bytes, so a burst's bytes that arrive together cross
together. What a direct connection would do still holds: bytes both ways, a half-close as a
half-close, a reset as a reset, a side that reads nothing holds its peer back (bounded), and
what the service wrote is counted until it went out.
"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Iterator

import pytest

from acklab.flows.sandbox import bridge_script
from acklab.flows.sandbox.bridge_script import UNSENT, Relays


@pytest.fixture(scope="module")
def relays() -> Iterator[Relays]:
    """One loop for the whole module, as the inner half has one for all its pairs."""
    loop = Relays()
    yield loop
    loop.close()
    assert loop.thread is None or not loop.thread.is_alive()


def pair_through(relays: Relays) -> tuple[socket.socket, socket.socket]:
    """(the service's end, the lab's end), relayed by `relays` as the inner half relays them."""
    service, service_side = socket.socketpair()
    lab_side, lab = socket.socketpair()
    relays.add(service_side, lab_side)
    for end in (service, lab):
        end.settimeout(10)
    return service, lab


def read_all(sock: socket.socket) -> bytes:
    chunks = []
    while chunk := sock.recv(1 << 16):
        chunks.append(chunk)
    return b"".join(chunks)


def test_many_pairs_relay_both_ways_in_one_loop_and_end_with_a_half_close(relays):
    pairs = [pair_through(relays) for _ in range(16)]
    for k, (_service, lab) in enumerate(pairs):
        lab.sendall(f"request {k}".encode())
        lab.shutdown(socket.SHUT_WR)  # the lab is done writing: the service reads its end
    for k, (service, _lab) in enumerate(pairs):
        assert read_all(service) == f"request {k}".encode()
        service.sendall(f"answer {k}".encode() * 1000)  # more than one read's worth
        service.close()
    for k, (_service, lab) in enumerate(pairs):
        assert read_all(lab) == f"answer {k}".encode() * 1000
        lab.close()
    assert relays.thread is not None  # one thread for all of them
    assert relays.thread.is_alive()


def tcp_pair() -> tuple[socket.socket, socket.socket]:
    """Two ends of a loopback TCP connection (a socket pair cannot carry a reset)."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        near = socket.create_connection(listener.getsockname())
        far, _ = listener.accept()
    return near, far


def hard_close(sock: socket.socket) -> None:
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


@pytest.mark.parametrize("who", ["service", "lab"])
def test_a_reset_on_either_side_resets_the_other(relays, who):
    service, service_side = tcp_pair()
    lab_side, lab = tcp_pair()
    relays.add(service_side, lab_side)
    for end in (service, lab):
        end.settimeout(10)
    lab.sendall(b"hello")
    assert service.recv(5) == b"hello"
    resetting, other = (service, lab) if who == "service" else (lab, service)
    hard_close(resetting)
    with pytest.raises(ConnectionResetError):
        read_all(other)
    other.close()


def test_a_side_that_reads_nothing_holds_its_peer_back(relays):
    service, lab = pair_through(relays)
    service.setblocking(False)
    sent = 0
    deadline = time.monotonic() + 10
    stuck_since = None
    while time.monotonic() < deadline:  # the lab never reads: the service's writes must stop taking bytes
        try:
            sent += service.send(b"z" * 65536)
            stuck_since = None
        except BlockingIOError:
            stuck_since = stuck_since or time.monotonic()
            if time.monotonic() - stuck_since > 0.5:
                break
            time.sleep(0.01)
    assert stuck_since is not None, f"the relay took {sent} bytes the lab never read, without end"
    assert sent < 64 << 20
    lab.setblocking(True)
    got = 0
    while got < sent:  # and all of it arrives once the lab reads
        got += len(lab.recv(1 << 20))
    assert got == sent
    service.close()
    lab.close()


def test_a_relay_that_fails_resets_its_own_pair_and_the_loop_relays_the_others(relays, monkeypatch, capfd):
    broken_service, broken_service_side = socket.socketpair()
    broken_lab_side, broken_lab = socket.socketpair()
    broken_fd = broken_lab_side.fileno()
    real_read = Relays._read

    def read(self: Relays, end: bridge_script._End) -> None:
        if end.fd == broken_fd:
            raise RuntimeError("a bug")
        real_read(self, end)

    monkeypatch.setattr(Relays, "_read", read)
    relays.add(broken_service_side, broken_lab_side)
    service, lab = pair_through(relays)
    broken_lab.settimeout(10)
    broken_lab.sendall(b"boom")
    with pytest.raises(ConnectionResetError):  # its pair was reset
        read_all(broken_lab)
    lab.sendall(b"still here")
    assert service.recv(100) == b"still here"  # the loop lives on for the others
    assert "a relay failed (RuntimeError: a bug); its connection is reset" in capfd.readouterr().err
    for end in (broken_service, broken_lab, service, lab):
        end.close()


def test_what_the_service_wrote_is_unsent_until_it_went_out(relays):
    UNSENT.drained(10)  # the pairs of the tests before have ended
    before = UNSENT.count
    service, lab = pair_through(relays)
    assert UNSENT.count == before + 1
    service.sendall(b"last words")
    service.close()
    assert lab.recv(100) == b"last words"
    UNSENT.drained(10)
    assert UNSENT.count == before
    lab.close()


def test_the_inner_half_relays_every_connection_in_the_one_loop_it_made_on_first_use(monkeypatch):
    monkeypatch.setattr(bridge_script, "_RELAYS", [])  # none made yet, as in a fresh inner half
    ends = []
    for k in range(3):
        service, service_side = socket.socketpair()
        lab_side, lab = socket.socketpair()
        bridge_script.relay(service_side, lab_side)
        lab.sendall(f"hello {k}".encode())
        service.settimeout(10)
        assert service.recv(100) == f"hello {k}".encode()
        ends += [service, lab]
    (loop,) = bridge_script._RELAYS
    assert loop.thread is not None
    assert len(loop.ends) == 6  # three pairs, both sides of each, in one loop
    for end in ends:
        end.close()
    loop.close()
