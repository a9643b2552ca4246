"""A `FaultProxy` on an event loop of its own, for sync code (the fixture's SQLAlchemy engine).

with ProxyThread(upstream=("127.0.0.1", pg_port), probe=postgres_probe) as proxy:
    engine = create_engine(f"postgresql+psycopg://postgres@127.0.0.1:{proxy.listen_port}/db")
    with proxy.inject(ResetPeer()):
        ...  # the same compensation as FaultProxy.inject: lifted and verified, even on error
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Coroutine, Iterator
from typing import Any, Self, TypeVar

from .errors import NetFaultError
from .events import EventListener, ProxyEvent
from .faults import Fault
from .proxy import FaultProxy, Probe

T = TypeVar("T")


class ProxyThread:
    """Runs a `FaultProxy` in a daemon thread; its methods block until the proxy has acted."""

    def __init__(
        self,
        upstream: tuple[str, int],
        *,
        listen_port: int = 0,
        name: str | None = None,
        probe: Probe | None = None,
        probe_timeout: float = 5.0,
        seed: int = 0,
        listener: EventListener | None = None,
        call_timeout: float = 30.0,
    ) -> None:
        self.proxy = FaultProxy(
            upstream,
            listen_port=listen_port,
            name=name,
            probe=probe,
            probe_timeout=probe_timeout,
            seed=seed,
            listener=listener,
        )
        self._call_timeout = call_timeout
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start the loop thread and the proxy on it."""
        loop = asyncio.new_event_loop()
        self._loop = loop
        self._thread = threading.Thread(
            target=loop.run_forever, name=f"acklab-{self.proxy.name}", daemon=True
        )
        self._thread.start()
        try:
            self._call(self.proxy.start())
        except BaseException:
            self._end_loop()
            raise

    def stop(self) -> None:
        """Stop the proxy (lifting nothing: `inject` already did) and end the loop thread."""
        if self._loop is None:
            return
        try:
            self._call(self.proxy.stop())
        finally:
            self._end_loop()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def listen_port(self) -> int:
        return self.proxy.listen_port

    @property
    def fault(self) -> Fault | None:
        return self.proxy.fault

    @property
    def events(self) -> tuple[ProxyEvent, ...]:
        return self.proxy.events

    @contextlib.contextmanager
    def inject(self, fault: Fault) -> Iterator[Fault]:
        """Inject ``fault`` for the body; then lift it and verify the link, even on error."""
        self.apply(fault)
        try:
            yield fault
        finally:
            self.lift()
            self.verify_healthy()

    def apply(self, fault: Fault) -> None:
        self._call(self.proxy.apply(fault))

    def lift(self) -> None:
        self._call(self.proxy.lift())

    def verify_healthy(self) -> None:
        self._call(self.proxy.verify_healthy())

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        if self._loop is None or not self._loop.is_running():
            coro.close()
            raise NetFaultError(
                f"{self.proxy.name}: the proxy thread is not running; use it as a context manager"
            )
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return future.result(self._call_timeout)
        except TimeoutError as exc:
            future.cancel()
            raise NetFaultError(
                f"{self.proxy.name}: no answer from the proxy thread in {self._call_timeout} s"
            ) from exc

    def _end_loop(self) -> None:
        loop, thread = self._loop, self._thread
        self._loop = self._thread = None
        if loop is None:
            return
        loop.call_soon_threadsafe(loop.stop)
        if thread is not None:
            thread.join(10)
        loop.run_until_complete(_cancel_the_rest())
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()


async def _cancel_the_rest() -> None:
    """Tasks still pending (handlers of connections the proxy closed) end with the loop."""
    rest = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
    for task in rest:
        task.cancel()
    await asyncio.gather(*rest, return_exceptions=True)
