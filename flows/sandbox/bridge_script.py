"""The bridge between the lab's loopback and a sandbox's own network namespace (stdlib only).

Run twice per confined launch, from its source text (``python -I -S -c SOURCE outer|inner CONFIG --
ARGV``), never imported from a checkout:

* ``outer``, as the lab's user on the host's network, starts ARGV (bubblewrap and everything in
  it) with one end of a socket pair at `CTL_FD`. It listens on the host's loopback on a port the
  service serves only once the service listens on it inside (so a connection is refused while
  the service is down, as it would be without the bridge), and hands every connection the lab
  opens there to the inside. On request it connects to one of the ports the config says the
  inside may reach (the lab's database server, its sinks) and hands that connection in too.
  Those are all the host sockets the inside ever holds: the outer is the only place that
  decides what is reached, so the code inside, whatever it does to the inner half, reaches
  nothing more. When the lab dies, the outer ends bubblewrap (and everything in it) too.
* ``inner``, inside the namespace as the sandbox's user, starts ARGV (the service), tells the
  outer when the service listens, listens for it on the reachable ports (on the namespace's own
  loopback, so the service's URLs need no change) and relays bytes between each pair of
  connections, a reset as a reset and a half-close as a half-close.

Its exit code is ARGV's (128 + the signal when a signal ended it).
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import selectors
import signal
import socket
import struct
import subprocess  # nosec B404
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

CTL_FD = 63
HOST = "127.0.0.1"
CONNECT_TIMEOUT_S = 10.0
LISTEN_POLL_S = 0.02
PARENT_POLL_S = 0.5
CHUNK = 1 << 16
MAX_MESSAGE = 4096
BACKLOG = 512


def say(message: str) -> None:
    print(f"acklab bridge: {message}", file=sys.stderr, flush=True)


def send(ctl: socket.socket, message: dict[str, Any], fd: int | None = None) -> None:
    data = json.dumps(message).encode()
    with contextlib.suppress(OSError):
        if fd is None:
            ctl.send(data)
        else:
            socket.send_fds(ctl, [data], [fd])


def receive(ctl: socket.socket) -> tuple[dict[str, Any] | None, socket.socket | None]:
    """One message and the socket it carries; (None, None) when the other side is gone."""
    try:
        data, fds, _flags, _addr = socket.recv_fds(ctl, MAX_MESSAGE, 1)
    except OSError:
        return None, None
    carried = socket.socket(fileno=fds[0]) if fds else None
    if not data:
        if carried is not None:
            carried.close()
        return None, None
    try:
        message = json.loads(data)
    except ValueError:
        message = {}
    return (message if isinstance(message, dict) else {}), carried


def reset(sock: socket.socket) -> None:
    """Close `sock` with a reset (RST), as the peer that reset its side would have."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        sock.close()


class Unsent:
    """How many relays still carry bytes the service wrote: when the service exits, the inner half
    waits for them (bounded), as the kernel would have sent what a process wrote before it died."""

    def __init__(self) -> None:
        self.count = 0
        self.changed = threading.Condition()

    def add(self, n: int) -> None:
        with self.changed:
            self.count += n
            self.changed.notify_all()

    def drained(self, timeout_s: float) -> None:
        with self.changed:
            self.changed.wait_for(lambda: self.count <= 0, timeout_s)


UNSENT = Unsent()
DRAIN_S = 5.0


class _End:
    """One socket of a relayed pair: the bytes still to write to it, and how far each way got."""

    __slots__ = ("fd", "out", "peer", "reading", "service", "shut", "shut_done", "sock")

    def __init__(self, sock: socket.socket, *, service: bool) -> None:
        sock.setblocking(False)
        self.sock, self.fd, self.service = sock, sock.fileno(), service
        self.peer: _End = self
        self.out = bytearray()  # read from the peer, not yet written here
        self.reading = True  # the peer of this socket has not half-closed it yet
        self.shut = False  # the peer's side ended: half-close this one once `out` is written
        self.shut_done = False


class Relays:
    """Every relayed pair of this half, in one loop of its own (epoll): the bytes of a burst that
    arrive together are copied together, not by one thread per connection taking turns for the
    interpreter. A side that cannot take more holds its peer's reading (at most `HELD` bytes
    wait here per direction); a reset on one side resets the other, a half-close half-closes it."""

    HELD = CHUNK * 4

    def __init__(self) -> None:
        self.epoll = select.epoll()
        self.ends: dict[int, _End] = {}
        self.masks: dict[int, int] = {}
        self.added: list[tuple[socket.socket, socket.socket]] = []
        self.lock = threading.Lock()
        self.wake_r, self.wake_w = socket.socketpair()
        self.wake_r.setblocking(False)
        self.wake_w.setblocking(False)
        self.epoll.register(self.wake_r.fileno(), select.EPOLLIN)
        self.thread: threading.Thread | None = None
        self.closing = False

    def add(self, service: socket.socket, other: socket.socket) -> None:
        UNSENT.add(1)
        with self.lock:
            self.added.append((service, other))
            if self.thread is None:
                self.thread = threading.Thread(target=self.run, daemon=True)
                self.thread.start()
        with contextlib.suppress(OSError):
            self.wake_w.send(b"x")

    def close(self) -> None:
        """Stop the loop and close what it holds: every relayed socket, its epoll and its wake-up
        pair. (The inner half never calls it: its loop lasts as long as the process.)"""
        self.closing = True
        with contextlib.suppress(OSError):
            self.wake_w.send(b"x")
        if self.thread is not None:
            self.thread.join(10)
        with self.lock:
            added, self.added = self.added, []
        for sock in [e.sock for e in self.ends.values()] + [s for pair in added for s in pair]:
            sock.close()
        self.ends.clear()
        for closable in (self.epoll, self.wake_r, self.wake_w):
            closable.close()

    def run(self) -> None:
        while not self.closing:
            for fd, events in self.epoll.poll():
                if fd == self.wake_r.fileno():
                    self._adopt()
                    continue
                end = self.ends.get(fd)
                if end is None:  # closed earlier in this round
                    continue
                try:
                    self._step(end, events)
                except Exception as exc:  # a bug here must not stop every other relay: this pair ends
                    say(f"a relay failed ({type(exc).__name__}: {exc}); its connection is reset")
                    self._reset(end)

    def _adopt(self) -> None:
        with contextlib.suppress(OSError):
            while self.wake_r.recv(4096):
                pass
        with self.lock:
            added, self.added = self.added, []
        for service, other in added:
            a, b = _End(service, service=True), _End(other, service=False)
            a.peer, b.peer = b, a
            for end in (a, b):
                self.ends[end.fd] = end
                self.masks[end.fd] = select.EPOLLIN
                self.epoll.register(end.fd, select.EPOLLIN)
            # Bytes may already wait on either side: the first poll finds them (level-triggered).

    def _step(self, end: _End, events: int) -> None:
        trouble = bool(events & (select.EPOLLHUP | select.EPOLLERR))
        try:
            # A hung-up side is read to its end even when its peer is full: no more can come.
            if end.reading and (len(end.peer.out) < self.HELD or trouble):
                self._read(end)
            if end.out or end.shut:
                self._flush(end)
            if trouble and not end.reading and not end.out:
                # Hung up before this side was half-closed by the lab: it was reset (its error may
                # have been read already); the other side is reset too.
                error = end.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                if error or not end.shut_done:
                    raise ConnectionResetError(error, "the connection went away")
        except OSError:
            self._reset(end)
            return
        self._settle(end)

    def _read(self, end: _End) -> None:
        try:
            data = end.sock.recv(CHUNK)
        except (BlockingIOError, InterruptedError):
            return
        if data:
            end.peer.out += data
        else:
            end.reading = False
            end.peer.shut = True
        self._flush(end.peer)

    def _flush(self, end: _End) -> None:
        while end.out:
            try:
                sent = end.sock.send(end.out)
            except (BlockingIOError, InterruptedError):
                return
            del end.out[:sent]
        if end.shut and not end.shut_done:
            end.shut_done = True
            end.sock.shutdown(socket.SHUT_WR)
            if end.peer.service:  # all the service wrote has gone out
                UNSENT.add(-1)

    def _settle(self, end: _End) -> None:
        pair = (end, end.peer)
        if all(not e.reading and e.shut_done for e in pair):
            for e in pair:
                self._drop(e)
                e.sock.close()
            return
        for e in pair:
            done = not e.reading and e.shut_done
            mask = (
                0
                if done
                else (
                    (select.EPOLLIN if e.reading and len(e.peer.out) < self.HELD else 0)
                    | (select.EPOLLOUT if e.out else 0)
                )
            )
            if done:  # nothing more to do on this side until its peer ends: out of the poll
                self._drop(e)
            elif self.masks.get(e.fd) != mask:
                self.masks[e.fd] = mask
                self.epoll.modify(e.fd, mask)

    def _drop(self, end: _End) -> None:
        if self.ends.pop(end.fd, None) is not None:
            self.masks.pop(end.fd, None)
            with contextlib.suppress(OSError, ValueError):
                self.epoll.unregister(end.fd)

    def _reset(self, end: _End) -> None:
        service = end if end.service else end.peer
        if not service.peer.shut_done:  # its bytes never all went out: count them as gone
            UNSENT.add(-1)
        for e in (end, end.peer):
            self._drop(e)
            reset(e.sock)


_RELAYS: list[Relays] = []  # made by the first relay (the outer half never relays)
_RELAYS_LOCK = threading.Lock()


def relay(service: socket.socket, peer: socket.socket) -> None:
    """Copy bytes both ways between the service's socket and its `peer` (in the one relay loop)
    until both directions ended; a reset on one side resets the other, a half-close half-closes it."""
    with _RELAYS_LOCK:
        if not _RELAYS:
            _RELAYS.append(Relays())
    _RELAYS[0].add(service, peer)


def listener(port: int) -> socket.socket:
    """A socket listening on the loopback at `port` (OSError when it cannot)."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind((HOST, port))
        server.listen(BACKLOG)
    except OSError:
        server.close()
        raise
    return server


def exit_code(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode


# -- outside: the lab's side ---------------------------------------------------------------------


class Outside:
    """The outer bridge's state: what it may listen on and reach, what it listens on, the child."""

    def __init__(self, config: dict[str, Any], ctl: socket.socket, child: subprocess.Popen[bytes]) -> None:
        self.serves = {int(p) for p in config.get("serves", [])}
        self.reaches = {int(p) for p in config.get("reaches", [])}
        self.ctl, self.child = ctl, child
        self.parent = int(config.get("parent", os.getppid()))  # the lab, which started this half
        self.listening: dict[int, socket.socket] = {}
        self.selector = selectors.DefaultSelector()

    def run(self, wake: int) -> int:
        self.selector.register(self.ctl, selectors.EVENT_READ, "ctl")
        self.selector.register(wake, selectors.EVENT_READ, "exit")
        while self.child.poll() is None:
            if os.getppid() != self.parent:  # the lab is gone: so is what it started (as --die-with-parent)
                self.child.kill()
            for key, _events in self.selector.select(timeout=PARENT_POLL_S):
                if key.data == "ctl":
                    self.asked()
                elif key.data != "exit":
                    self.accept(int(key.data))
        for sock in self.listening.values():
            sock.close()
        return exit_code(self.child.wait())

    def accept(self, port: int) -> None:
        """Every connection waiting on `port` (a burst's arrive together: none waits a round)."""
        while True:
            try:
                conn, _addr = self.listening[port].accept()
            except OSError:  # none left (BlockingIOError), or the listener is gone
                return
            with contextlib.suppress(OSError):
                conn.setblocking(True)
                send(self.ctl, {"op": "accepted", "port": port}, conn.fileno())
            conn.close()  # the inside holds the only copy: its close is the lab's close

    def asked(self) -> None:
        message, carried = receive(self.ctl)
        if carried is not None:
            carried.close()  # the inside never hands the outside a socket
        if message is None:
            self.selector.unregister(self.ctl)
            return
        op, port = message.get("op"), message.get("port")
        if op == "listening" and isinstance(port, int) and port in self.serves and port not in self.listening:
            self.listen(port)
        elif op == "connect" and isinstance(port, int):
            ident = message.get("id")
            if port not in self.reaches:
                say(f"refused: the sandbox asked for {HOST}:{port}, which it may not reach")
                send(self.ctl, {"op": "refused", "id": ident})
                return
            threading.Thread(target=_connect, args=(self.ctl, port, ident), daemon=True).start()

    def listen(self, port: int) -> None:
        try:
            server = listener(port)
        except OSError as exc:
            say(f"cannot listen on {HOST}:{port} for the service: {exc}")
            self.child.terminate()
            return
        server.setblocking(False)
        self.listening[port] = server
        self.selector.register(server, selectors.EVENT_READ, port)


def outer(config: dict[str, Any], argv: list[str]) -> int:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    os.dup2(theirs.fileno(), CTL_FD, inheritable=True)
    theirs.close()
    try:
        child = subprocess.Popen(argv, pass_fds=(CTL_FD,))  # nosec B603 - the lab's own argv
    finally:
        os.close(CTL_FD)
    signal.signal(signal.SIGTERM, lambda *_: child.terminate())
    wake_r, wake_w = os.pipe()

    def waited() -> None:
        child.wait()
        os.write(wake_w, b"x")

    threading.Thread(target=waited, daemon=True).start()
    return Outside(config, ours, child).run(wake_r)


def _connect(ctl: socket.socket, port: int, ident: Any) -> None:
    try:
        conn = socket.create_connection((HOST, port), timeout=CONNECT_TIMEOUT_S)
    except OSError:
        send(ctl, {"op": "refused", "id": ident})
        return
    conn.settimeout(None)
    send(ctl, {"op": "connected", "id": ident}, conn.fileno())
    conn.close()


# -- inside: the sandbox's side ------------------------------------------------------------------


def inner(config: dict[str, Any], argv: list[str]) -> int:
    serves = [int(p) for p in config.get("serves", [])]
    reaches = [int(p) for p in config.get("reaches", [])]
    ctl = socket.socket(fileno=CTL_FD)
    waiting: dict[int, socket.socket] = {}
    lock = threading.Lock()
    for port in reaches:  # before the service starts: its first connection finds them
        try:
            server = listener(port)
        except OSError as exc:
            say(f"cannot listen on {HOST}:{port} inside the sandbox for the lab's port: {exc}")
            continue
        threading.Thread(target=_reach, args=(server, port, ctl, waiting, lock), daemon=True).start()
    service = subprocess.Popen(argv)  # nosec B603 - the launch the lab was asked to confine
    threading.Thread(target=_announce, args=(serves, ctl, service.poll), daemon=True).start()
    threading.Thread(target=_from_outside, args=(ctl, waiting, lock, service), daemon=True).start()
    code = exit_code(service.wait())
    UNSENT.drained(DRAIN_S)  # what the service wrote before it ended still reaches the lab
    sys.stderr.flush()
    os._exit(code)


def _reach(
    server: socket.socket,
    port: int,
    ctl: socket.socket,
    waiting: dict[int, socket.socket],
    lock: threading.Lock,
) -> None:
    ident = 0
    while True:
        try:
            conn, _addr = server.accept()
        except OSError:
            return
        with lock:
            ident += 1
            key = port * 1_000_000 + ident
            waiting[key] = conn
        send(ctl, {"op": "connect", "port": port, "id": key})


def _announce(serves: list[int], ctl: socket.socket, poll: Callable[[], int | None]) -> None:
    pending = set(serves)
    while pending and poll() is None:
        for port in sorted(pending & _listening()):
            send(ctl, {"op": "listening", "port": port})
            pending.discard(port)
        time.sleep(LISTEN_POLL_S)


def _listening() -> set[int]:
    """Ports something listens on in this network namespace (read from /proc, nothing connects)."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table, encoding="ascii") as lines:
                rows = lines.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if len(fields) > 3 and fields[3] == "0A":  # TCP_LISTEN
                found.add(int(fields[1].rsplit(":", 1)[1], 16))
    return found


def _from_outside(
    ctl: socket.socket,
    waiting: dict[int, socket.socket],
    lock: threading.Lock,
    service: subprocess.Popen[bytes],
) -> None:
    while True:
        message, carried = receive(ctl)
        if message is None:  # the lab's side is gone: so is the service
            with contextlib.suppress(OSError):
                service.kill()
            return
        op = message.get("op")
        if op == "accepted" and carried is not None:
            threading.Thread(target=_serve, args=(carried, int(message.get("port", 0))), daemon=True).start()
            continue
        with lock:
            conn = waiting.pop(message.get("id"), None)  # type: ignore[arg-type]
        if conn is None:
            if carried is not None:
                carried.close()
        elif op == "connected" and carried is not None:
            relay(conn, carried)
        else:
            reset(conn)  # refused outside: refused here
            if carried is not None:
                carried.close()


def _serve(outside: socket.socket, port: int) -> None:
    """One connection the lab opened: to the service inside, or reset when it does not answer."""
    for family, address in ((socket.AF_INET, HOST), (socket.AF_INET6, "::1")):
        inside = socket.socket(family, socket.SOCK_STREAM)
        try:
            inside.connect((address, port))
        except OSError:
            inside.close()
            continue
        relay(inside, outside)
        return
    reset(outside)


def main(args: list[str]) -> int:
    role, config, separator, *argv = args
    if role not in ("outer", "inner") or separator != "--" or not argv:
        raise SystemExit("usage: bridge outer|inner CONFIG -- ARGV")
    parsed = json.loads(config)
    return outer(parsed, argv) if role == "outer" else inner(parsed, argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
