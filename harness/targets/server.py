"""A real uvicorn server on a free loopback port, in a thread of this process.

Used where a fault or an experiment needs a real socket (concurrency, timeouts, resets):
the built-in fixture, the benchmark and the tests' own handlers.
"""

from __future__ import annotations

import socket
import threading
import time
from types import TracebackType
from typing import Any, Literal

import uvicorn

from acklab.harness.errors import HarnessError


class ThreadedServer:
    """``with ThreadedServer(app) as server: server.url`` — started on enter, stopped on exit."""

    def __init__(
        self,
        app: Any,
        *,
        host: str = "127.0.0.1",
        startup_timeout_s: float = 15.0,
        lifespan: Literal["auto", "on", "off"] = "on",
    ) -> None:
        self._app, self._host, self._startup_timeout_s = app, host, startup_timeout_s
        # "on" for the lab's own apps; "auto" for a user's app, which may not speak lifespan.
        self._lifespan = lifespan
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://{self._host}:{self.port}"

    def start(self) -> ThreadedServer:
        # IPPROTO_TCP explicitly: asyncio sets TCP_NODELAY only on accepted sockets whose proto
        # says TCP, and with proto 0 every response written in two parts (head, then body)
        # waits out the client's delayed ACK: ~40 ms per request instead of ~0.5 ms.
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self._host, 0))
        self.port = sock.getsockname()[1]
        # ws="none": no websocket protocol is needed, and importing one only adds warnings.
        config = uvicorn.Config(
            self._app,
            log_level="warning",
            access_log=False,
            lifespan=self._lifespan,
            ws="none",
            server_header=False,
        )
        self._server = uvicorn.Server(config)
        # A short grace period: an in-flight request of a killed trial must not hold up the exit.
        config.timeout_graceful_shutdown = 2
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [sock]}, name=f"uvicorn:{self.port}", daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + self._startup_timeout_s
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                sock.close()
                raise HarnessError(f"the server on port {self.port} did not start (see its log above)")
            time.sleep(0.005)
        return self  # uvicorn owns the socket now and closes it at shutdown

    def stop(self) -> None:
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._thread.join(timeout=10)
        self._server = self._thread = None

    def __enter__(self) -> ThreadedServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
