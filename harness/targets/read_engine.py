"""One read-only engine shared by a probe's reads, from any thread, let go only once no read
holds one of its connections.

A probe's reads run in worker threads (`asyncio.to_thread`), many at once: a trial's
observation and the end-of-run re-read gather one read per event. A caller may stop waiting
for a read (a sibling of its gather failed, its task was cancelled) while the read's thread
still holds a connection, and close the probe. `Engine.dispose` closes only the connections
checked in to its pool: one returned afterwards went back to a pool nobody would close, and
stayed open until the garbage collector found it (psycopg's ResourceWarning, in whatever ran
then). So closing refuses every read asked for from then on, waits until each read in flight
has returned its connection, and only then disposes of the engine. The engine is made once,
under the same lock: two first reads at once would each make one, and the one overwritten
would never be disposed.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from sqlalchemy.engine import Connection, Engine

from acklab.harness.errors import ProbeError

# A read that outlives this after the close began is stuck (a query the database never
# answers): its connection is left behind rather than the run held forever.
CLOSE_WAIT_S = 60.0


class ReadEngine:
    """The engine `make` returns, made on the first read; `close` waits out the reads in flight."""

    def __init__(self, make: Callable[[], Engine], label: str) -> None:
        self._make, self._label = make, label
        self._engine: Engine | None = None
        self._reading = 0
        self._closed = False
        self._changed = threading.Condition()

    @contextmanager
    def connect(self) -> Iterator[Connection]:
        """A connection of the engine, held until the block ends (ProbeError once closed)."""
        with self._changed:
            if self._closed:
                raise ProbeError(
                    f"a read of {self._label} was asked for after its probe was closed: the run had "
                    "stopped waiting for it"
                )
            if self._engine is None:
                self._engine = self._make()
            engine = self._engine
            self._reading += 1
        try:
            with engine.connect() as conn:
                yield conn
        finally:
            with self._changed:
                self._reading -= 1
                self._changed.notify_all()

    def close(self, wait_s: float = CLOSE_WAIT_S) -> None:
        """Refuse new reads, wait until none holds a connection, then close every connection."""
        with self._changed:
            self._closed = True
            self._changed.wait_for(lambda: self._reading == 0, timeout=wait_s)
            engine, self._engine = self._engine, None
        if engine is not None:
            engine.dispose()
