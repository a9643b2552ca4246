"""What an app served in the lab's own process is still doing: observed, so a count can settle.

An app the lab serves itself (`harness.targets.app`: in this event loop, or on uvicorn in a
thread of this process) is in reach of the lab's eyes: every HTTP call into it passes
`observed`, and every task created while such a call runs (the context it copies says so)
is tracked until it is done — a background task, a Starlette ``BackgroundTasks`` run after
the response, a fire-and-forget ``create_task``. Tasks the app's lifespan starts (a worker
draining an in-process queue) are tracked the same way and live as long as the app, so an
app that keeps one never looks idle.

`Activity.idle()` is then a fact, not a guess: nothing the app was handed is still running
in a loop the lab can see. A count read while the app is idle is settled
(`harness.core.trial`): no fixed window needs to pass. What stays out of sight — a thread the
app starts itself, a timer it schedules with ``call_later`` — is what the settle window
(when the app is not idle) and the end-of-run re-read are for.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Coroutine
from typing import Any, cast

# Set while a call into the app runs: the tasks created under it are the app's.
_INSIDE: contextvars.ContextVar[Activity] = contextvars.ContextVar("acklab_app_activity")


class Activity:
    """Calls in flight into one app, and the tasks they (or its lifespan) left running; shared
    by the loops that serve it (the lab's own, and a uvicorn thread's)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._calls = 0
        self._tasks: set[asyncio.Future[Any]] = set()

    def idle(self) -> bool:
        """Whether no HTTP call into the app is running and no task it started is pending."""
        with self._lock:
            return self._calls == 0 and not self._tasks

    def _enter(self) -> None:
        with self._lock:
            self._calls += 1

    def _exit(self) -> None:
        with self._lock:
            self._calls -= 1

    def _track(self, task: asyncio.Future[Any]) -> None:
        with self._lock:
            self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Future[Any]) -> None:
        with self._lock:
            self._tasks.discard(task)


def observed(app: Any, activity: Activity) -> Any:
    """`app` with its calls counted and the tasks they create tracked by `activity` (lifespan
    calls are not counted — one lasts as long as the app — but their tasks are tracked)."""

    async def observed_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        watch(asyncio.get_running_loop())
        token = _INSIDE.set(activity)
        counted = scope.get("type") != "lifespan"
        if counted:
            activity._enter()
        try:
            await app(scope, receive, send)
        finally:
            if counted:
                activity._exit()
            _INSIDE.reset(token)

    return observed_app


def watch(loop: asyncio.AbstractEventLoop) -> None:
    """Have `loop` tell every app activity about the tasks created inside one of its calls (once
    per loop; a task factory the loop already had still makes the tasks)."""
    previous = loop.get_task_factory()
    if getattr(previous, "acklab_watching", False):
        return

    def factory(loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, Any], **options: Any) -> Any:
        if previous is not None:
            task = previous(loop, coro, **options)
        else:
            task = asyncio.Task(coro, loop=loop, **options)
        context = options.get("context")
        activity = context.get(_INSIDE, None) if context is not None else _INSIDE.get(None)
        if activity is not None:
            activity._track(task)
        return task

    factory.acklab_watching = True  # type: ignore[attr-defined]
    factory.acklab_previous = previous  # type: ignore[attr-defined]
    # typeshed's _TaskFactory names no keyword options; asyncio passes `name` and `context` (3.11+).
    loop.set_task_factory(cast("Any", factory))


def unwatch(loop: asyncio.AbstractEventLoop) -> None:
    """Give `loop` back the task factory it had before `watch`."""
    current = loop.get_task_factory()
    if getattr(current, "acklab_watching", False):
        loop.set_task_factory(getattr(current, "acklab_previous", None))
