"""Over a real socket: concurrent duplicates, a sender timeout overlapping a slow handler, and a
crash between commit and response."""

from __future__ import annotations

import asyncio
import signal
from typing import Any, Literal

import httpx
import pytest
from pydantic import SecretStr

from acklab.app.main import create_app
from acklab.app.settings import Settings
from tests.app.conftest import SECRET, new_event_id, order_event, standard_headers
from tests.app.servers import serve_in_subprocess, serve_in_thread

pytestmark = pytest.mark.slow


async def _burst(base_url: str, body: bytes, headers: dict[str, str], n: int) -> list[httpx.Response]:
    async with httpx.AsyncClient(base_url=base_url, timeout=60) as client:
        return list(
            await asyncio.gather(
                *(client.post("/webhooks/orders", content=body, headers=headers) for _ in range(n))
            )
        )


# httpx's default 5 s is too short when this runs inside the repair flow's verify step on a
# loaded 2-core machine (seen once in make demo); a hang still fails, just later.
LOADED_MACHINE_S = 60


def _effects(base_url: str, event_id: str) -> int:
    return int(httpx.get(f"{base_url}/events/{event_id}/effects", timeout=LOADED_MACHINE_S).json()["count"])


@pytest.mark.parametrize(("handler", "expect_one"), [("live", True), ("unsafe", False)])
def test_sixteen_identical_deliveries_at_once(
    database_url: str, handler: Literal["live", "unsafe"], expect_one: bool
) -> None:
    app = create_app(Settings(database_url=database_url, secret=SecretStr(SECRET), handler=handler))
    event_id = new_event_id()
    body = order_event(event_id)
    with serve_in_thread(app) as base_url:
        responses = asyncio.run(_burst(base_url, body, standard_headers(event_id, body), 16))
        effects = _effects(base_url, event_id)
    app.state.fixture.engine.dispose()

    assert [r.status_code for r in responses if r.status_code >= 500] == []
    assert all(r.status_code == 200 for r in responses), {r.status_code for r in responses}
    if expect_one:
        assert effects == 1
        assert sum(r.headers.get("idempotent-replayed") == "true" for r in responses) == 15
        assert len({r.content for r in responses}) == 1
    else:
        assert effects > 1


DELAY_MS = 2000
# The sender gives up after this: long enough for a loaded server to have read the body (at 0.2 s,
# under load, the client was once gone before the body was read: ClientDisconnect, no delivery,
# 1 effect instead of 2), far shorter than the handler's delay.
FIRST_READ_S = 0.5


@pytest.mark.parametrize(("handler", "expected"), [("live", 1), ("unsafe", 2)])
def test_a_retry_into_a_slow_handler_after_a_sender_timeout(
    database_url: str, handler: str, expected: int
) -> None:
    # A window far wider than the retry takes to arrive, on a slow machine too (800 ms was once
    # not: the unsafe handler's retry found the first delivery committed, 1 effect instead of 2).
    settings: dict[str, Any] = {"processing_delay_ms": DELAY_MS, "handler": handler}
    app = create_app(Settings(database_url=database_url, secret=SecretStr(SECRET), **settings))
    event_id = new_event_id()
    body = order_event(event_id)
    with serve_in_thread(app) as base_url:
        with pytest.raises(httpx.ReadTimeout):  # the sender gives up while the handler still works
            httpx.post(
                f"{base_url}/webhooks/orders",
                content=body,
                headers=standard_headers(event_id, body),
                timeout=httpx.Timeout(5, read=FIRST_READ_S),
            )
        # the delay is inside the transaction: nothing is visible before the commit
        assert _effects(base_url, event_id) == 0
        retry = httpx.post(
            f"{base_url}/webhooks/orders", content=body, headers=standard_headers(event_id, body), timeout=30
        )
    # The server has stopped: uvicorn stops only once every request it took has run to its end,
    # the abandoned first delivery too. Whatever it was going to commit is committed now.
    with serve_in_thread(app) as base_url:
        effects = _effects(base_url, event_id)
    app.state.fixture.engine.dispose()

    assert retry.status_code == 200
    assert effects == expected
    if handler == "live":
        assert retry.headers["idempotent-replayed"] == "true"


def test_a_crash_between_commit_and_response_keeps_the_commit(sqlite_url: str) -> None:
    event_id = new_event_id()
    body = order_event(event_id)
    args = ["--secret", SECRET, "--db", sqlite_url, "--log-level", "warning"]
    with serve_in_subprocess(*args, "--crash-after-commit") as served:
        with pytest.raises(httpx.TransportError):  # no response: the process is gone
            httpx.post(
                f"{served.url}/webhooks/orders",
                content=body,
                headers=standard_headers(event_id, body),
                timeout=LOADED_MACHINE_S,
            )
        assert served.process.wait(LOADED_MACHINE_S) == -signal.SIGKILL
    with serve_in_subprocess(*args) as served:
        assert _effects(served.url, event_id) == 1  # committed before the crash
        retry = httpx.post(
            f"{served.url}/webhooks/orders",
            content=body,
            headers=standard_headers(event_id, body),
            timeout=LOADED_MACHINE_S,
        )
        assert (retry.status_code, retry.headers.get("idempotent-replayed")) == (200, "true")
        assert _effects(served.url, event_id) == 1
