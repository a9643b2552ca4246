"""``acklab.attack``: an app object attacked in this process — serving, lifespan, effects, bad input.

The apps are small Starlette (ASGI) and plain WSGI apps keeping their effects in a dict; the
lab counts them through a callable or an HTTP path of the app itself. Every attack here is
short (one experiment or three, one trial) and judged from what the lab recorded.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

import acklab
from acklab.harness.engine.api import _interruptible
from acklab.harness.engine.late_read import LATE_GRACE_S
from acklab.harness.errors import HarnessError, ProbeError, RunInterrupted, SpecError
from acklab.harness.targets.app import NEEDS_SOCKET
from acklab.harness.targets.asgi import interface_of
from acklab.harness.targets.fixture import new_secret


class Shop:
    """A consumer that dedupes by event id under a lock (correct), or not at all (`unsafe`);
    `echo_after_s`: it also writes a second effect of each event that long after its answer,
    from a task left running in its event loop (a background job's duplicate)."""

    def __init__(
        self, *, unsafe: bool = False, needs_lifespan: bool = False, echo_after_s: float | None = None
    ) -> None:
        self.effects: dict[str, int] = {}
        self.unsafe, self.needs_lifespan, self.echo_after_s = unsafe, needs_lifespan, echo_after_s
        self._lock = threading.Lock()
        self.lifespans: list[str] = []  # "startup" / "shutdown", in the order they ran

    def echo(self, event_id: str) -> None:
        with self._lock:
            self.effects[event_id] += 1

    def count(self, event_id: str) -> int:
        return self.effects.get(event_id, 0)

    def record(self, event_id: str) -> str:
        with self._lock:
            if event_id in self.effects and not self.unsafe:
                return "duplicate"
            self.effects[event_id] = self.effects.get(event_id, 0) + 1
            return "fulfilled"

    def asgi(self) -> Starlette:
        @asynccontextmanager
        async def lifespan(app: Starlette) -> AsyncIterator[dict[str, Any]]:
            self.lifespans.append("startup")
            yield {"open": True}
            self.lifespans.append("shutdown")

        async def hooks(request: Request) -> JSONResponse:
            if self.needs_lifespan and not getattr(request.state, "open", False):
                return JSONResponse({"error": "not started"}, status_code=503)
            event = json.loads(await request.body())
            status = self.record(event["id"])
            if self.echo_after_s is not None and status == "fulfilled":
                asyncio.get_running_loop().call_later(self.echo_after_s, self.echo, event["id"])
            return JSONResponse({"status": status})

        async def effects(request: Request) -> JSONResponse:
            return JSONResponse({"count": self.count(request.path_params["event_id"])})

        routes = [Route("/hooks", hooks, methods=["POST"]), Route("/effects/{event_id}", effects)]
        return Starlette(routes=routes, lifespan=lifespan)


def attack(app: Any, tmp_path: Path, **options: Any) -> acklab.RunResult:
    options.setdefault("endpoint", "/hooks")
    options.setdefault("trials", 1)
    options.setdefault("seed", 11)
    return acklab.attack(app, out=tmp_path / "out", **options)


def test_in_process_only_runs_what_needs_no_socket_and_lists_the_rest_with_why(tmp_path):
    shop = Shop()
    result = attack(
        shop.asgi(),
        tmp_path,
        effects=shop.count,
        serving="in-process",
        experiments=["lost-ack", "lost-ack-reset", "concurrent-duplicates", "crash-after-commit", "db-reset"],
    )
    assert result.passed, result.explain()
    verdicts = {e.name: (e.verdict, e.reason) for e in result.experiments}
    assert verdicts["lost-ack"][0] == "pass"
    assert verdicts["lost-ack-reset"] == ("skipped", NEEDS_SOCKET)
    assert verdicts["concurrent-duplicates"] == ("skipped", NEEDS_SOCKET)
    assert verdicts["crash-after-commit"][0] == "skipped"
    assert "runs inside the test's own process" in str(verdicts["crash-after-commit"][1])
    assert "keeps its own database connection" in str(verdicts["db-reset"][1])
    explained = result.explain()
    assert "lost-ack-reset: skipped — it needs a real connection" in explained
    assert explained.startswith("acklab: app PASSED (exit 0): 0 of 1 experiment(s) failed, 4 skipped")
    # The boundary of what was proven says how the deliveries travelled.
    (incident,) = (result.bundle / "incidents").glob("*.json")
    assert "in-process (ASGI, no socket)" in json.loads(incident.read_text())["boundary"]


def test_an_unsafe_app_fails_with_the_violations_named_and_counted_through_its_own_http_path(tmp_path):
    shop = Shop(unsafe=True)
    result = attack(
        shop.asgi(),
        tmp_path,
        effects={"http": {"url": "/effects/{{event_id}}", "json_path": "count"}},
        experiments=["lost-ack", "concurrent-duplicates"],
    )
    assert result.verdict == "fail"
    assert result.exit_code == acklab.ExitCode.VERDICT_FAILED
    assert {v.experiment for v in result.violations} == {"lost-ack", "concurrent-duplicates"}
    lost = result.experiment("lost-ack")
    (violation,) = lost.violations
    assert (violation.invariant, violation.observed, violation.expected) == ("at-most-once-effect", 2, "<= 1")
    assert violation.delivery == {"seq": 1, "kind": "retry", "attempt": 2}
    assert lost.incident is not None
    assert lost.incident.is_file()
    explained = result.explain()
    assert f"at-most-once-effect on event {violation.event_id}: observed 2, expected <= 1" in explained
    assert f"incident: {lost.incident}" in explained
    assert explained.index("concurrent-duplicates: FAIL") < explained.index("evidence: ")
    # The same result, read back from the bundle; the bundle is intact.
    assert acklab.RunResult.load(result.bundle).run == result.run
    assert acklab.verify_bundle(result.bundle).ok


def test_work_left_running_by_the_app_served_on_uvicorn_is_still_seen_by_the_end_of_run_read(tmp_path):
    # The uvicorn server of lost-ack-reset keeps running (taking no deliveries) while the app is
    # served in-process for the experiments after it: the duplicate its loop writes later counts.
    # The echo comes after the server was parked and within the re-read's grace (LATE_GRACE_S):
    # a timer is out of the lab's sight, so the trial itself judged one effect.
    shop = Shop(echo_after_s=LATE_GRACE_S * 0.8)
    result = attack(
        shop.asgi(),
        tmp_path,
        effects=shop.count,
        experiments=["lost-ack-reset", "lost-ack", "conflicting-payload"],
    )
    reset = result.experiment("lost-ack-reset")
    assert reset.verdict == "fail", result.explain()
    (violation,) = reset.violations
    assert (violation.invariant, violation.observed) == ("at-most-once-effect", 2)


def test_a_spec_written_for_acklab_run_counts_on_the_app_itself_over_its_own_url(tmp_path):
    # Endpoint and effects on the same host and port: the app serves both, nothing listens there.
    shop = Shop()
    spec = {
        "name": "shop",
        "endpoint": "http://127.0.0.1:9/hooks",
        "signing": {"scheme": "none"},
        "event": {"id": "{{event_id}}", "type": "order.paid", "amount": 5},
        "effects": {"http": {"url": "http://127.0.0.1:9/effects/{{event_id}}", "json_path": "count"}},
        "expect": {"conflict": "ignore"},
        "command": {"argv": ["never-started"]},
    }
    result = attack(shop.asgi(), tmp_path, spec=spec, endpoint=None, experiments=["lost-ack", "replay"])
    assert result.passed, result.explain()
    assert result.target == "shop"
    assert result.experiment("replay").reason == (
        "replay: the scheme signs nothing (signing.scheme: none), so no delivery can be forged"
    )


def test_the_lifespan_runs_around_the_attack_in_process_and_on_uvicorn(tmp_path):
    for serving in ("in-process", "socket"):
        shop = Shop(needs_lifespan=True)  # the request sees the lifespan's state, or answers 503
        result = attack(
            shop.asgi(), tmp_path, effects=shop.count, serving=serving, experiments=["lost-ack", "replay"]
        )
        assert result.passed, result.explain()
        # Once for the whole attack, as a deployed app's, and shut down before attack() returns.
        assert shop.lifespans == ["startup", "shutdown"], serving
    shop = Shop()
    failing = Starlette(lifespan=_failing_lifespan)
    with pytest.raises(
        HarnessError, match="the app's startup failed: RuntimeError: database is down"
    ) as caught:
        attack(failing, tmp_path, effects=shop.count)
    assert caught.value.exit_code == acklab.ExitCode.LAB_ERROR


@asynccontextmanager
async def _failing_lifespan(app: Starlette) -> AsyncIterator[None]:
    raise RuntimeError("database is down")
    yield  # pragma: no cover - never reached


def test_a_wsgi_app_and_an_async_effects_callable(tmp_path):
    shop = Shop()
    flask = Flask("shop")

    @flask.post("/hooks")
    def hooks() -> dict[str, str]:
        from flask import request

        return {"status": shop.record(request.get_json()["id"])}

    async def count(event_id: str) -> int:
        await asyncio.sleep(0)
        return shop.count(event_id)

    secret = new_secret()
    result = attack(
        flask, tmp_path, effects=count, secret=secret, experiments=["lost-ack", "concurrent-duplicates"]
    )
    assert result.passed, result.explain()
    # The signing secret is in no file the run wrote.
    written = b"".join(p.read_bytes() for p in (tmp_path / "out").rglob("*") if p.is_file())
    assert secret.encode() not in written


@pytest.mark.parametrize(
    ("app", "interface"),
    [
        (Starlette(), "asgi"),
        (Flask("x"), "wsgi"),
        (lambda environ, start_response: [], "wsgi"),
        (lambda scope, receive, send: None, "asgi"),
    ],
)
def test_the_interface_is_told_from_the_call(app, interface):
    assert interface_of(app) == interface


def test_an_app_whose_interface_cannot_be_told_names_the_option():
    with pytest.raises(SpecError, match="pass interface='asgi' or interface='wsgi'"):
        interface_of(lambda request: None)
    with pytest.raises(SpecError, match="got str, which is not callable"):
        interface_of("main:app")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"endpoint": None}, "endpoint: got None; pass the path the app serves webhooks at"),
        ({"effects": None}, "effects: missing; pass effects=lambda event_id"),
        ({"effects": 3}, "effects: got int; expected a callable"),
        ({"state": len, "effects": {"http": {"url": "/e/{{event_id}}", "json_path": "n"}}}, "state callable"),
        ({"spec": {"expcet": {}}}, "did you mean 'expect'"),
        ({"signing": "standard"}, "signing: 'secret' is a required property"),
        ({"conflict": {"data.amount.x": 1}}, "conflict.set: the path 'data.amount.x' stops at 'amount'"),
        ({"experiments": ["lost-akc"]}, "Did you mean 'lost-ack'"),
        ({"trials": 0}, "trials: got 0; expected a whole number from 1 to 10000"),
        ({"serving": "threads"}, "serving: got 'threads'; expected one of auto, in-process, socket"),
        ({"spec": 42}, "spec: got int; expected the path of a target spec file or the spec as a dict"),
    ],
)
def test_bad_input_is_refused_naming_the_value_and_the_fix(tmp_path, options, message):
    shop = Shop()
    options.setdefault("effects", shop.count)
    with pytest.raises(SpecError, match=re.escape(message)) as caught:
        attack(shop.asgi(), tmp_path, **options)
    assert caught.value.exit_code == acklab.ExitCode.INVALID_INPUT
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").glob("*/run.json"))


@pytest.mark.parametrize(
    ("count", "message"),
    [
        (
            lambda event_id: 1 / 0,
            r"the effects callable <lambda> at test_app_targets.py:\d+ raised ZeroDivisionError",
        ),
        (lambda event_id: "two", r"gave 'two'; expected a non-negative integer count"),
    ],
)
def test_an_effects_callable_that_cannot_count_stops_the_run_as_a_lab_error(tmp_path, count, message):
    with pytest.raises(ProbeError, match=message) as caught:
        attack(Shop().asgi(), tmp_path, effects=count)
    assert caught.value.exit_code == acklab.ExitCode.LAB_ERROR


def test_an_attack_from_a_running_event_loop_runs_beside_it(tmp_path):
    shop = Shop()

    async def async_test() -> acklab.RunResult:
        return attack(shop.asgi(), tmp_path, effects=shop.count, experiments=["lost-ack"])

    assert asyncio.run(async_test()).passed


def test_ctrl_c_stops_the_caller_and_a_deadline_stays_resumable():
    def interrupted(deadline: bool) -> acklab.RunResult:
        raise RunInterrupted("interrupted: kept in out/x", deadline=deadline)

    with pytest.raises(KeyboardInterrupt, match="kept in out/x"):
        _interruptible(lambda: interrupted(False))
    with pytest.raises(RunInterrupted):
        _interruptible(lambda: interrupted(True))


def test_run_takes_a_target_and_run_options_and_names_the_options_it_knows(tmp_path):
    result = acklab.run("fixture:unsafe", experiments="lost-ack", trials=1, seed=3, out=tmp_path)
    assert (result.verdict, result.passed, int(result.exit_code)) == ("fail", False, 1)
    assert result.as_json()["experiments"][0]["violations"][0]["invariant"] == "at-most-once-effect"
    assert "lost-ack: FAIL" in result.explain()
    with pytest.raises(TypeError, match=r"acklab.run\(\): .*the options are: experiments, trials"):
        acklab.run("fixture:live", triels=3)  # type: ignore[call-arg]  # a caller mypy does not check


@pytest.mark.parametrize("hangs_on", ["preflight", "first-event"])
def test_a_callable_that_never_returns_is_abandoned_at_the_deadline_naming_it(tmp_path, hangs_on):
    shop, released = Shop(), threading.Event()

    def never_returns(event_id: str) -> int:
        if hangs_on == "preflight" or event_id != "acklab-preflight":
            released.wait()  # a session stuck on a lock: never returns (until the test ends)
        return shop.count(event_id)

    started = time.monotonic()
    try:
        with pytest.raises(RunInterrupted) as stopped:
            attack(shop.asgi(), tmp_path, effects=never_returns, experiments="lost-ack", deadline_s=1)
    finally:
        released.set()
    assert time.monotonic() - started < 10  # the deadline, not the callable, ended it
    assert stopped.value.exit_code == 6
    assert stopped.value.deadline
    message = str(stopped.value)
    assert "the effects callable " in message
    assert "never_returns" in message
    assert "abandoned in its thread" in message
