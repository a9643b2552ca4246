"""An ASGI app served by uvicorn on loopback, in a thread of its own, for the whole run.

The outbound sink and the provider's API both answer a consumer under test: in a thread of
their own, a busy lab loop never slows their answers (and an answer that waits on the lab's
loop, the provider's echo, cannot deadlock it).
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any

from acklab.harness.errors import HarnessError

START_TIMEOUT_S = 10.0


class ThreadedServer:
    """`app` on uvicorn at ``host:port``, in a daemon thread; `start` returns once it accepts connections."""

    def __init__(self, app: Any, host: str, port: int, *, name: str, placeholder: str) -> None:
        self.app, self.host, self.port = app, host, port
        self.name, self.placeholder = name, placeholder
        self._server: Any = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        import uvicorn

        config = uvicorn.Config(
            self.app,
            host=self.host,
            port=self.port,
            log_config=None,
            log_level="critical",
            access_log=False,
            lifespan="off",
        )
        self._server = server = uvicorn.Server(config)

        def serve() -> None:
            # uvicorn exits (SystemExit) when it cannot bind: the thread ends, start() says why.
            with contextlib.suppress(SystemExit, OSError):
                server.run()

        self._thread = threading.Thread(target=serve, name=f"acklab-{self.name}", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + START_TIMEOUT_S
        while not server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise HarnessError(
                    f"effects.{self.name}: the sink could not listen on {self.host}:{self.port}; "
                    f"is the port taken? use {self.placeholder}"
                )
            time.sleep(0.01)

    def stop(self) -> None:
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._thread.join(timeout=10)
        self._server = self._thread = None
