"""Effects and state counted by the user's own Python code (``effects=lambda event_id: ...``).

In a test suite the handler's database is the test's: an in-memory SQLite the lab cannot
open, or a PostgreSQL schema made for this test. The user counts with their own ORM
session instead: a callable given one event id returns that event's number of side
effects (or, for ``state=``, its committed state). It may be sync or async.

A sync callable is called in one (daemon) thread of its own, the same for every call of a run: not
the thread of the lab's event loop (Django refuses ORM calls from a thread that runs an
event loop, and a blocking count there would stall an app served in that loop), and not
the test's. A session or connection it did not make itself must allow use from another
thread: SQLAlchemy's do for SQLite files; ``sqlite3.connect`` needs
``check_same_thread=False``. An async callable is awaited in the lab's loop. Whatever a
callable raises, or returns that is not a count, is a `ProbeError` (exit 4): an unreadable
count is a lab failure, never a zero.

A callable that never returns is bounded by the run's deadline (``deadline_s``): the lab
stops waiting, the call is abandoned in its thread (a daemon: it cannot keep the process
alive) and the run ends with exit 6 naming it (`CallableThread.waiting_on`).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any

from acklab.evidence.documents.records import ObservationSource
from acklab.evidence.redaction import redact
from acklab.harness.errors import ProbeError
from acklab.harness.targets.effects import as_count
from acklab.harness.targets.state import canonical

# Sync or async: event id -> count (effects=) or state (state=); one that takes an ``object_id``
# keyword is given the event's object too (lifecycle.object: out-of-order reads the object's state).
Reader = Callable[..., Any]


def takes_object(fn: Callable[..., Any]) -> bool:
    """Whether `fn` accepts an ``object_id`` keyword (or any keyword)."""
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == "object_id" or p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)


def callable_name(fn: Callable[..., Any]) -> str:
    """How messages name a callable: its qualified name, or ``<lambda>`` with where it was defined."""
    name = getattr(fn, "__qualname__", None) or type(fn).__name__
    code = getattr(fn, "__code__", None)
    if code is not None and "<lambda>" in name:
        return f"<lambda> at {code.co_filename.rsplit('/', 1)[-1]}:{code.co_firstlineno}"
    return str(name)


class CallableThread(Executor):
    """One daemon thread that runs a run's sync callables in turn, and what it is waiting on.

    Not a `ThreadPoolExecutor`: its threads are joined when the interpreter exits, so a
    callable that never returns would keep the process (a pytest session) alive forever.
    """

    def __init__(self) -> None:
        self._work: queue.SimpleQueue[tuple[Future[Any], Callable[[], Any]] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._serve, name="acklab-effects", daemon=True)
        self._thread.start()
        self._pending: dict[int, tuple[str, str, float]] = {}  # call -> (what, event id, since)

    def _serve(self) -> None:
        while (item := self._work.get()) is not None:
            future, call = item
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(call())
            except BaseException as exc:  # handed to the awaiting coroutine, as an executor does
                future.set_exception(exc)

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        future: Future[Any] = Future()
        self._work.put((future, functools.partial(fn, *args, **kwargs)))
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self._work.put(None)  # a callable still running is abandoned: the thread is a daemon
        if wait:
            self._thread.join(timeout=1)

    def waiting(self, key: int, what: str, event_id: str) -> None:
        self._pending[key] = (what, event_id, time.monotonic())

    def done(self, key: int) -> None:
        self._pending.pop(key, None)

    def waiting_on(self) -> str | None:
        """The user's call the lab has waited on longest, in words (None: none in progress)."""
        if not self._pending:
            return None
        what, event_id, since = min(self._pending.values(), key=lambda p: p[2])
        return f"{what} (called for event {event_id!r} {time.monotonic() - since:.1f} s ago, never returned)"


async def _call(fn: Reader, event_id: str, what: str, thread: Executor, object_id: str | None = None) -> Any:
    # As a query's :object_id, the object defaults to the event's own id.
    call = (
        functools.partial(fn, event_id, object_id=event_id if object_id is None else object_id)
        if takes_object(fn)
        else functools.partial(fn, event_id)
    )
    if not isinstance(thread, CallableThread):
        return await _called(fn, call, event_id, what, thread)
    key = id(call)
    thread.waiting(key, what, event_id)
    try:
        value = await _called(fn, call, event_id, what, thread)
    except asyncio.CancelledError:
        raise  # left pending: the call is abandoned, and the run's deadline names it
    except BaseException:
        thread.done(key)
        raise
    thread.done(key)
    return value


async def _called(fn: Reader, call: Callable[[], Any], event_id: str, what: str, thread: Executor) -> Any:
    try:
        if inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(type(fn).__call__):
            value = await call()
        else:
            value = await asyncio.get_running_loop().run_in_executor(thread, call)
            if inspect.isawaitable(value):  # a sync function that returned a coroutine
                value = await value
    except Exception as exc:  # the user's code: whatever it raises is the probe's failure
        message = redact(str(exc)) if str(exc) else ""
        raise ProbeError(
            f"{what} raised {type(exc).__name__}{': ' + message if message else ''} for event {event_id!r}; "
            "it is called with one event id and must read that event from the handler's database"
        ) from exc
    return value


class CallableProbe:
    """``effects=``: the user's callable counts one event's side effects."""

    source: ObservationSource = "callable"

    def __init__(self, count: Reader, thread: Executor) -> None:
        self._count, self._thread = count, thread
        self._what = f"the effects callable {callable_name(count)}"
        self.by_object = takes_object(count)

    async def count(self, event_id: str, object_id: str | None = None) -> int:
        return as_count(await _call(self._count, event_id, self._what, self._thread, object_id), self._what)

    async def aclose(self) -> None:
        """Nothing to release: the callable's session belongs to the caller."""


class CallableState:
    """``state=``: the user's callable reads one event's committed state (any JSON-able value)."""

    def __init__(self, read: Reader, thread: Executor) -> None:
        self._read, self._thread = read, thread
        self._what = f"the state callable {callable_name(read)}"
        self.by_object = takes_object(read)

    async def read(self, event_id: str, object_id: str | None = None) -> str:
        return canonical(await _call(self._read, event_id, self._what, self._thread, object_id))

    async def aclose(self) -> None:
        """Nothing to release: the callable's session belongs to the caller."""


def callable_thread() -> CallableThread:
    """The one thread a run's sync callables are called in (shut it down when the run ends)."""
    return CallableThread()
