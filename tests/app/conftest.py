"""Fixtures for the webhook fixture's tests: apps on SQLite and PostgreSQL, a sync ASGI client,
signed order events, and row counts read straight from the database."""

from __future__ import annotations

import base64
import functools
import json
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from anyio.from_thread import BlockingPortal, start_blocking_portal
from fastapi import FastAPI
from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session
from standardwebhooks import Webhook

from acklab.app.main import create_app
from acklab.app.models import Fulfillment, Order, Receipt
from acklab.app.settings import Settings
from acklab.app.signing import standard_signature
from acklab.harness.wire.variation import Draw

SECRET = "whsec_" + base64.b64encode(b"acklab-test-secret-32-bytes-long").decode()
OTHER_SECRET = "whsec_" + base64.b64encode(b"some-other-secret-32-bytes-long!").decode()


DRAWN: Any = object()  # order_event: the value the lab's generator draws for this event


def order_event(
    event_id: str | None = None,
    *,
    amount_cents: Any = DRAWN,
    currency: Any = DRAWN,
    order_id: str | None = None,
    type: str = "order.paid",
    drop: tuple[str, ...] = (),
    **extra: Any,
) -> bytes:
    """The raw body of an order event, as a sender would serialise it.

    Amount, currency and the order of the fields are drawn for the event id by the lab's own
    generator (`harness.wire.variation`), as the lab draws them for its deliveries: a handler
    that special-cases what the tests send fails the lab, and the other way round. `drop`
    leaves fields of ``data`` out.
    """
    event_id = event_id or new_event_id()
    draw = Draw(event_id)
    drawn = draw.values(avoid_amounts=(9900,))
    data = {
        "order_id": order_id or "ord_" + event_id[-8:],
        "amount_cents": drawn["amount_cents"] if amount_cents is DRAWN else amount_cents,
        "currency": drawn["currency"] if currency is DRAWN else currency,
    }
    event: dict[str, Any] = {
        "id": event_id,
        "type": type,
        "timestamp": datetime.now(UTC).isoformat(),
        "data": {k: v for k, v in data.items() if k not in drop},
    }
    event.update(extra)
    return json.dumps(draw.reordered(event)).encode()


def drawn(event_id: str) -> dict[str, Any]:
    """The amount and currency `order_event` draws for `event_id`."""
    return Draw(event_id).values(avoid_amounts=(9900,))


def new_event_id() -> str:
    """A fresh event id in one of the formats the lab sends (the same generator)."""
    return Draw(uuid.uuid4().hex).identifier("evt_", "event")


def standard_headers(event_id: str, body: bytes, *, secret: str = SECRET, skew_s: int = 0) -> dict[str, str]:
    """Standard Webhooks headers signed by the reference library (not by the code under test)."""
    stamp = datetime.fromtimestamp(int(time.time()) + skew_s, tz=UTC)
    try:
        signature = Webhook(secret).sign(event_id, stamp, body.decode())
    except UnicodeDecodeError:  # the reference library signs text only; a sender may still send bytes
        signature = standard_signature(secret, event_id, int(stamp.timestamp()), body)
    return {
        "webhook-id": event_id,
        "webhook-timestamp": str(int(stamp.timestamp())),
        "webhook-signature": signature,
        "content-type": "application/json",
    }


class AppClient:
    """A synchronous client for an ASGI app in-process (starlette's TestClient warns under httpx 0.28)."""

    def __init__(self, app: FastAPI, portal: BlockingPortal) -> None:
        self.app = app
        self._portal = portal
        self._client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://fixture")

    def request(self, method: str, url: str, **kwargs: Any) -> httpx.Response:
        return self._portal.call(functools.partial(self._client.request, method, url, **kwargs))

    def get(self, url: str, **kwargs: Any) -> httpx.Response:
        return self.request("GET", url, **kwargs)

    def post(self, url: str, **kwargs: Any) -> httpx.Response:
        return self.request("POST", url, **kwargs)

    def deliver(self, body: bytes, headers: dict[str, str]) -> httpx.Response:
        return self.post("/webhooks/orders", content=body, headers=headers)

    def effects(self, event_id: str) -> int:
        response = self.get(f"/events/{event_id}/effects")
        assert response.status_code == 200, response.text
        return int(response.json()["count"])

    @property
    def engine(self) -> Engine:
        return self.app.state.fixture.engine

    def rows(self) -> dict[str, int]:
        """How many rows each table holds: "nothing written" means this did not change."""
        with Session(self.engine) as session:
            return {
                model.__tablename__: session.execute(select(func.count()).select_from(model)).scalar_one()
                for model in (Order, Fulfillment, Receipt)
            }

    def close(self) -> None:
        self._portal.call(self._client.aclose)


@pytest.fixture
def portal() -> Iterator[BlockingPortal]:
    with start_blocking_portal() as portal:
        yield portal


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def database_url(request: pytest.FixtureRequest, tmp_path: Any) -> str:
    """A fresh database of each kind: a SQLite file, or a new PostgreSQL database."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/fixture.db"
    return str(request.getfixturevalue("pg_url"))


@pytest.fixture
def sqlite_url(tmp_path: Any) -> str:
    return f"sqlite:///{tmp_path}/fixture.db"


MakeClient = Callable[..., AppClient]


@pytest.fixture
def make_client(database_url: str, portal: BlockingPortal) -> Iterator[MakeClient]:
    """Build an app on this test's database (settings overridable) and a client for it."""
    made: list[AppClient] = []

    def make(**overrides: Any) -> AppClient:
        settings = Settings(**{"database_url": database_url, "secret": SECRET, **overrides})
        client = AppClient(create_app(settings), portal)
        made.append(client)
        return client

    yield make
    for client in made:
        client.close()
        client.engine.dispose()


@pytest.fixture
def client(make_client: MakeClient) -> AppClient:
    """The live handler under the standard scheme."""
    return make_client()
