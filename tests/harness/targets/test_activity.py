"""An app the lab serves in its own process is watched, not waited for (harness/targets/activity.py).

Its calls in flight and the tasks they leave running make it busy; once it is idle, one read
of its effects is final. An app that still runs something the lab can see — a task writing a
duplicate later, a worker its lifespan keeps — settles over the window as any target does,
and what it writes after that is the end-of-run re-read's to find.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

import acklab
from acklab.harness.targets.activity import Activity, observed
from acklab.harness.targets.server import ThreadedServer


class LateWriter:
    """Records each event once on its first delivery and, with `late_s`, once more that long after
    it answered, from a task it leaves running (a background job's duplicate). `worker`: its
    lifespan keeps a task running as long as the app (a queue worker with nothing to drain).
    It notes when it last answered each event and every read of its effects (monotonic)."""

    def __init__(self, late_s: float | None = None, *, worker: bool = False) -> None:
        self.late_s, self.worker = late_s, worker
        self.effects: dict[str, int] = {}
        self.answered: dict[str, float] = {}
        self.reads: list[tuple[str, float]] = []
        self._lock = threading.Lock()

    def count(self, event_id: str) -> int:
        self.reads.append((event_id, time.monotonic()))
        return self.effects.get(event_id, 0)

    def reads_after_last_answer(self, event_id: str) -> int:
        return sum(1 for e, at in self.reads if e == event_id and at > self.answered[event_id])

    def _add(self, event_id: str) -> None:
        with self._lock:
            self.effects[event_id] = self.effects.get(event_id, 0) + 1

    def app(self) -> Starlette:
        tasks: set[asyncio.Task[None]] = set()

        async def later(event_id: str, delay_s: float) -> None:
            await asyncio.sleep(delay_s)
            self._add(event_id)

        async def hooks(request: Request) -> JSONResponse:
            event_id = json.loads(await request.body())["id"]
            status = "duplicate" if event_id in self.effects else "fulfilled"
            if status == "fulfilled":
                self._add(event_id)
                if self.late_s is not None:
                    task = asyncio.get_running_loop().create_task(later(event_id, self.late_s))
                    tasks.add(task)  # fire and forget
                    task.add_done_callback(tasks.discard)
            self.answered[event_id] = time.monotonic()
            return JSONResponse({"status": status})

        @asynccontextmanager
        async def lifespan(app: Starlette) -> AsyncIterator[None]:
            idle = asyncio.get_running_loop().create_task(asyncio.sleep(3600)) if self.worker else None
            yield
            if idle is not None:
                idle.cancel()

        return Starlette(routes=[Route("/hooks", hooks, methods=["POST"])], lifespan=lifespan)


def test_a_call_and_the_tasks_it_leaves_make_an_app_busy_until_they_end_in_any_loop():
    activity = Activity()
    release = threading.Event()

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        async def linger() -> None:
            while not release.is_set():
                await asyncio.sleep(0.005)

        asyncio.get_running_loop().create_task(linger())
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    assert activity.idle()
    # Served on uvicorn in a thread of its own (its own event loop), as the lab serves a socket.
    with ThreadedServer(observed(app, activity), lifespan="off") as server:
        assert httpx.get(server.url, timeout=10).status_code == 200
        assert not activity.idle()  # answered, but the task it started still runs
        release.set()
        for _ in range(400):
            if activity.idle():
                break
            threading.Event().wait(0.005)
        assert activity.idle()


def attack(app: Any, shop: LateWriter, tmp_path: Path) -> tuple[acklab.RunResult, dict[str, Any]]:
    result = acklab.attack(
        app,
        endpoint="/hooks",
        effects=shop.count,
        experiments=["lost-ack"],
        trials=1,
        seed=3,
        out=tmp_path / "out",
    )
    (trial,) = (result.bundle / "trials").glob("lost-ack-*.json")
    return result, json.loads(trial.read_text())


def test_an_idle_app_settles_on_one_read(tmp_path):
    shop = LateWriter()
    result, trial = attack(shop.app(), shop, tmp_path)
    assert result.passed, result.explain()
    (event_id,) = {o["event_id"] for o in trial["observations"] if o["note"] == "final"}
    # After the retry's answer: the settling read, and the end-of-run re-read. A window would
    # have read three times before judging.
    assert shop.reads_after_last_answer(event_id) == 2


def test_an_app_with_a_task_still_running_settles_over_the_window_and_the_re_read_finds_the_rest(tmp_path):
    # The duplicate comes four settle windows after the answer: the trial judged one effect,
    # the end-of-run re-read (after its grace) counts two and fails the trial.
    shop = LateWriter(late_s=0.2)
    result, trial = attack(shop.app(), shop, tmp_path)
    lost_ack = result.experiment("lost-ack")
    assert lost_ack.verdict == "fail", result.explain()
    (violation,) = lost_ack.violations
    assert (violation.invariant, violation.observed) == ("at-most-once-effect", 2)
    assert [o["effects"] for o in trial["observations"] if o["note"] == "final"] == [1]
    (event_id,) = trial["late_read"]["grew"]
    assert shop.reads_after_last_answer(event_id) >= 3 + 1  # the window's reads, then the re-read


def test_an_app_whose_lifespan_keeps_a_worker_running_is_never_idle(tmp_path):
    shop = LateWriter(worker=True)
    result, trial = attack(shop.app(), shop, tmp_path)
    assert result.passed, result.explain()
    (event_id,) = {o["event_id"] for o in trial["observations"] if o["note"] == "final"}
    assert shop.reads_after_last_answer(event_id) >= 3 + 1
