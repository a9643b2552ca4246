"""Servers the burst tests attack: raw asyncio servers that see the bytes, and hypercorn (HTTP/2).

`RawServer` runs a connection handler on an event loop of its own thread, so the lab's loop
and the server's never wait on each other. `capture` records every request's raw bytes and
answers 200; `close_unanswered` closes every webhook connection without an answer (after its
first read: a server that drops a request that did not arrive whole). Both answer
``GET /effects/<id>`` with a count of 0, so a target spec can name them as its effects.
`HypercornServer` serves an ASGI app over HTTP/1.1 and HTTP/2 (prior knowledge) on one port.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine
from types import TracebackType
from typing import Any

from hypercorn.asyncio import serve
from hypercorn.config import Config

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
READY_S = 15.0


class _LoopThread:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def call(self, coro: Coroutine[Any, Any, Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(READY_S)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()


class RawServer:
    """``with RawServer(handler) as server: server.url("/hooks")``."""

    def __init__(self, handler: Handler) -> None:
        self._handler = handler
        self._thread = _LoopThread()
        self._server: asyncio.Server | None = None
        self.port = 0

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def __enter__(self) -> RawServer:
        self._thread.start()

        async def start() -> asyncio.Server:
            return await asyncio.start_server(self._handler, "127.0.0.1", 0)

        self._server = self._thread.call(start())
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def __exit__(self, *exc: object) -> None:
        if self._server is not None:
            server = self._server

            async def stop() -> None:
                server.close()
                # Connections the lab left open would hold wait_closed: close ends listening only.

            self._thread.call(stop())
        self._thread.stop()


async def read_request(reader: asyncio.StreamReader) -> tuple[bytes, bytes] | None:
    """(head, body) of the next request on the connection, or None when it closed."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, ConnectionError):
        return None
    length = next(
        (
            int(line.split(b":", 1)[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        ),
        0,
    )
    try:
        body = await reader.readexactly(length)
    except (asyncio.IncompleteReadError, ConnectionError):
        return None
    return head, body


def answer(writer: asyncio.StreamWriter, body: bytes) -> None:
    writer.write(
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n"
        b"x-acklab-entered-ns: %d\r\n\r\n%s" % (len(body), time.monotonic_ns(), body)
    )


def effects(head: bytes) -> bytes | None:
    """The effects probe's answer (count 0) when `head` asks for it."""
    return json.dumps({"count": 0}).encode() if head.startswith(b"GET /effects/") else None


def capture_into(server_requests: list[bytes]) -> Handler:
    """Record each webhook request's raw bytes (head and body) and answer 200 ``{}``."""

    async def capture(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while (request := await read_request(reader)) is not None:
            head, body = request
            probe = effects(head)
            if probe is None:
                server_requests.append(head + body)
            answer(writer, probe if probe is not None else b"{}")
        writer.close()

    return capture


async def close_unanswered(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Answer GETs (the effects probe, readiness); close a webhook connection after its first
    read, unanswered — as a server does that drops a request which did not arrive whole."""
    data = await reader.read(65536)
    if data.startswith(b"GET "):
        answer(writer, effects(data) or b"{}")
        await writer.drain()
    writer.close()


class HypercornServer:
    """An ASGI app served by hypercorn on a free loopback port: HTTP/1.1 and HTTP/2 (h2c)."""

    def __init__(self, app: Any) -> None:
        self._app = app
        self._thread = _LoopThread()
        self._stop: asyncio.Event | None = None
        self._serving: asyncio.Future[Any] | None = None
        self.port = 0

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def __enter__(self) -> HypercornServer:
        import socket

        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        self.port = probe.getsockname()[1]
        probe.close()
        config = Config()
        config.bind = [f"127.0.0.1:{self.port}"]
        config.loglevel = "WARNING"
        config.accesslog = None
        self._thread.start()

        async def start() -> None:
            self._stop = asyncio.Event()
            self._serving = asyncio.ensure_future(serve(self._app, config, shutdown_trigger=self._stop.wait))

        self._thread.call(start())
        deadline = time.monotonic() + READY_S
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return self
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"hypercorn did not start on port {self.port}") from None
                time.sleep(0.02)

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        async def stop() -> None:
            if self._stop is not None and self._serving is not None:
                self._stop.set()
                await asyncio.wait_for(self._serving, 10)

        self._thread.call(stop())
        self._thread.stop()
