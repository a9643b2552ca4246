"""A user's web app as the lab serves it: ASGI as it is, WSGI adapted, its lifespan run.

* `as_asgi`: an ASGI app (FastAPI, Starlette, Django's ASGI handler) is served as it is; a
  WSGI app (Flask, Django's WSGI handler) is adapted with `a2wsgi`, which runs each request
  in a thread pool as a WSGI server would. ``interface="auto"`` tells them apart the way
  uvicorn does: a coroutine function is ASGI; otherwise two parameters are WSGI and three
  ASGI.
* `running`: the ASGI lifespan protocol in this event loop — startup before the first
  request, shutdown after the last — with the lifespan state copied into every request's
  scope, as uvicorn does. An app that does not speak lifespan (it raises, or returns,
  before answering the startup) is served without it, as uvicorn's ``--lifespan auto``
  would; one that reports ``lifespan.startup.failed`` is a lab error naming its message.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from acklab.harness.errors import HarnessError, SpecError

INTERFACES = ("auto", "asgi", "wsgi")
# Threads a2wsgi runs WSGI requests in: enough for a concurrent-duplicates burst (16 by default).
WSGI_WORKERS = 32
LIFESPAN_TIMEOUT_S = 30.0

AsgiApp = Callable[..., Any]


def _parameters(call: Callable[..., Any]) -> int | None:
    try:
        signature = inspect.signature(call)
    except (TypeError, ValueError):
        return None
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return sum(p.kind in kinds for p in signature.parameters.values())


def interface_of(app: Any) -> str:
    """``asgi`` or ``wsgi``, told from the app's call signature; SpecError when it cannot be told."""
    if not callable(app):
        raise SpecError(
            f"app: got {type(app).__name__}, which is not callable; expected an ASGI app (FastAPI, "
            "Starlette) or a WSGI app (Flask, Django's get_wsgi_application())"
        )
    call = app if inspect.isfunction(app) or inspect.ismethod(app) else app.__call__
    if inspect.iscoroutinefunction(call):
        return "asgi"
    count = _parameters(call)
    if count == 2:
        return "wsgi"
    if count == 3:
        return "asgi"
    raise SpecError(
        f"app: cannot tell whether {type(app).__name__} is an ASGI or a WSGI app (its call takes "
        f"{count if count is not None else 'unknown'} parameters); pass interface='asgi' or interface='wsgi'"
    )


def as_asgi(app: Any, interface: str = "auto") -> tuple[AsgiApp, Callable[[], None] | None]:
    """The app as ASGI, and what to call when the lab is done with it (None: nothing)."""
    if interface not in INTERFACES:
        raise SpecError(f"interface: got {interface!r}; expected one of {', '.join(INTERFACES)}")
    kind = interface_of(app) if interface == "auto" else interface
    if kind == "asgi":
        return app, None
    try:
        from a2wsgi import WSGIMiddleware
    except ModuleNotFoundError as exc:  # a core dependency; missing only from a broken install
        raise HarnessError(
            "serving a WSGI app needs the Python package 'a2wsgi': pip install a2wsgi (or reinstall acklab)"
        ) from exc
    adapted = WSGIMiddleware(app, workers=WSGI_WORKERS)
    return adapted, lambda: adapted.executor.shutdown(wait=False)


def with_state(app: AsgiApp, state: dict[str, Any]) -> AsgiApp:
    """`app` with a copy of the lifespan `state` in every request's scope (what uvicorn does)."""

    async def app_with_state(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] in ("http", "websocket"):
            scope = {**scope, "state": dict(state)}
        await app(scope, receive, send)

    return app_with_state


async def _answer(outbox: asyncio.Queue[dict[str, Any]], task: asyncio.Task[Any]) -> dict[str, Any] | None:
    """The app's next lifespan message, or None when it returned (or raised) without one."""
    getter = asyncio.ensure_future(outbox.get())
    try:
        done, _ = await asyncio.wait(
            {getter, task}, timeout=LIFESPAN_TIMEOUT_S, return_when="FIRST_COMPLETED"
        )
    finally:
        if not getter.done():
            getter.cancel()
    if getter in done:
        return getter.result()
    if task in done:
        return None
    raise HarnessError(
        f"the app did not finish its lifespan step within {LIFESPAN_TIMEOUT_S:g} s; "
        "check its startup and shutdown code (or pass lifespan=False)"
    )


@asynccontextmanager
async def running(app: AsgiApp, *, lifespan: bool = True) -> AsyncIterator[AsgiApp]:
    """`app` started (lifespan startup) for the duration of the block, then shut down."""
    if not lifespan:
        yield app
        return
    state: dict[str, Any] = {}
    inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    outbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    scope = {"type": "lifespan", "asgi": {"version": "3.0", "spec_version": "2.0"}, "state": state}

    async def receive() -> dict[str, Any]:
        return await inbox.get()

    async def send(message: dict[str, Any]) -> None:
        await outbox.put(message)

    async def call() -> None:
        await app(scope, receive, send)

    task = asyncio.create_task(call())
    try:
        await inbox.put({"type": "lifespan.startup"})
        answer = await _answer(outbox, task)
        if answer is None:
            # No lifespan support: the app raised or returned on the lifespan scope.
            if not task.cancelled():
                task.exception()  # retrieved: it is the app's way of saying "not supported"
            yield app
            return
        if answer.get("type") == "lifespan.startup.failed":
            # Starlette sends the whole traceback: its last line is the exception.
            lines = str(answer.get("message") or "").strip().splitlines()
            raise HarnessError(f"the app's startup failed: {lines[-1] if lines else '(no message)'}")
        yield with_state(app, state)
        await inbox.put({"type": "lifespan.shutdown"})
        # A shutdown that fails or hangs changes no verdict: every trial was recorded already.
        with contextlib.suppress(HarnessError):
            await _answer(outbox, task)
    finally:
        if not task.done():
            task.cancel()
            await asyncio.wait({task}, timeout=5)
        if task.done() and not task.cancelled():
            task.exception()  # retrieved, so asyncio does not log it as never seen
