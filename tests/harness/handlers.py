"""Webhook handlers the lab has to judge, served over a real socket as external targets.

Each variant is a small frozen dataclass with one method (`process`), the way Schemathesis
injects bugs into its fixture apps. All verify Standard Webhooks signatures with the
reference library (`standardwebhooks`), so the replay experiment judges real verification.

Wrong on purpose:  NoDedupe, CheckThenInsert (races), AcceptsConflicts (200 to a conflict).
Correct:           Receipt (unique claim), Serialized (per-event lock), Receipt(delay_s=...) (slow).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Protocol

from sqlalchemy import (
    Column,
    Connection,
    Engine,
    Integer,
    MetaData,
    String,
    Table,
    create_engine,
    select,
    text,
)
from sqlalchemy.exc import IntegrityError
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

metadata = MetaData()
receipts = Table(
    "receipts",
    metadata,
    Column("event_id", String(64), primary_key=True),
    Column("body_sha256", String(64), nullable=False),
)
# No constraint on purpose: only a lock (or luck) keeps two rows of one event out.
seen = Table(
    "seen", metadata, Column("event_id", String(64), nullable=False), Column("body_sha256", String(64))
)
fulfillments = Table(
    "fulfillments",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("event_id", String(64), nullable=False),
    Column("amount_cents", Integer),
)

EFFECTS_QUERY = "SELECT count(*) FROM fulfillments WHERE event_id = :event_id"
ENTERED_HEADER = "X-Acklab-Entered-Ns"  # as the fixture's (app/routes.py); the lab reads it


@dataclass(frozen=True)
class Delivery:
    event_id: str
    body_sha256: str
    amount_cents: int


class Variant(Protocol):
    def process(self, engine: Engine, delivery: Delivery) -> tuple[int, dict[str, Any]]: ...


def _fulfil(conn: Connection, delivery: Delivery) -> None:
    conn.execute(fulfillments.insert().values(event_id=delivery.event_id, amount_cents=delivery.amount_cents))


@dataclass(frozen=True)
class NoDedupe:
    """Fulfils every delivery: a retry is a second shipment."""

    def process(self, engine: Engine, delivery: Delivery) -> tuple[int, dict[str, Any]]:
        with engine.begin() as conn:
            _fulfil(conn, delivery)
        return 200, {"status": "fulfilled"}


@dataclass(frozen=True)
class CheckThenInsert:
    """Looks for the event, works a little, then records it: two concurrent deliveries both pass the check."""

    work_s: float = 0.02

    def process(self, engine: Engine, delivery: Delivery) -> tuple[int, dict[str, Any]]:
        with engine.connect() as conn:
            known = conn.execute(select(seen.c.event_id).where(seen.c.event_id == delivery.event_id)).first()
        if known is not None:
            return 200, {"status": "duplicate"}
        time.sleep(self.work_s)
        with engine.begin() as conn:
            conn.execute(seen.insert().values(event_id=delivery.event_id, body_sha256=delivery.body_sha256))
            _fulfil(conn, delivery)
        return 200, {"status": "fulfilled"}


# The slow but correct handler: its work, holding the claim, outlasts the sender's timeout, so
# every first attempt times out while it still works and the retry lands on a handler still
# working; its replay must then answer within the timeout. At 150 ms of work behind 100 ms, a
# loaded machine (the bench's reliability parts, load 9 on two cores) made the replay miss
# 100 ms on every attempt of a run, 1-2 runs in 20: the margins are three times that.
SLOW_WORK_S = 0.45
SLOW_SENDER_TIMEOUT_S = 0.3


@dataclass(frozen=True)
class Receipt:
    """Claims the event with a unique receipt, fulfils in the same transaction; replays or refuses duplicates.

    `delay_s` is work done while holding the claim (a slow but correct handler);
    `conflict_status` is what a different body under a used id gets (200 makes it wrong).
    """

    delay_s: float = 0.0
    conflict_status: int = 409

    def process(self, engine: Engine, delivery: Delivery) -> tuple[int, dict[str, Any]]:
        try:
            with engine.begin() as conn:
                conn.execute(
                    receipts.insert().values(event_id=delivery.event_id, body_sha256=delivery.body_sha256)
                )
                if self.delay_s:
                    time.sleep(self.delay_s)
                _fulfil(conn, delivery)
        except IntegrityError:
            with engine.connect() as conn:
                stored = conn.execute(
                    select(receipts.c.body_sha256).where(receipts.c.event_id == delivery.event_id)
                ).scalar_one()
            if stored == delivery.body_sha256:
                return 200, {"status": "replayed"}
            return self.conflict_status, {"error": "conflict"}
        return 200, {"status": "fulfilled"}


_LOCK = threading.Lock()


@dataclass(frozen=True)
class Serialized:
    """Check-then-insert made correct by a per-event lock held across check and commit.

    PostgreSQL: a transaction-scoped advisory lock on the event id; SQLite: one process-wide lock.
    """

    def process(self, engine: Engine, delivery: Delivery) -> tuple[int, dict[str, Any]]:
        if engine.dialect.name == "postgresql":
            with engine.begin() as conn:
                conn.execute(text("SELECT pg_advisory_xact_lock(hashtext(:k))"), {"k": delivery.event_id})
                return self._check_then_insert(conn, delivery)
        with _LOCK, engine.begin() as conn:
            return self._check_then_insert(conn, delivery)

    @staticmethod
    def _check_then_insert(conn: Connection, delivery: Delivery) -> tuple[int, dict[str, Any]]:
        known = conn.execute(select(seen.c.body_sha256).where(seen.c.event_id == delivery.event_id)).first()
        if known is not None:
            return (
                (200, {"status": "duplicate"})
                if known[0] == delivery.body_sha256
                else (409, {"error": "conflict"})
            )
        conn.execute(seen.insert().values(event_id=delivery.event_id, body_sha256=delivery.body_sha256))
        _fulfil(conn, delivery)
        return 200, {"status": "fulfilled"}


# A receipt handler that answers 200 to a conflicting body (it never creates a second effect).
AcceptsConflicts = Receipt(conflict_status=200)


POOL = 20


def handler_app(variant: Variant, db_url: str, secret: str, *, warm: bool = False) -> Starlette:
    """A Starlette app: POST /hooks verified with the reference library, then `variant.process`.
    `warm`: its pool's connections are opened at startup, as a service's are in steady state
    (on PostgreSQL each is a SCRAM handshake: a cold pool makes the first burst pay sixteen)."""
    connect_args = {"timeout": 30} if db_url.startswith("sqlite") else {}
    engine = create_engine(db_url, connect_args=connect_args, pool_size=POOL, max_overflow=20)
    metadata.create_all(engine)
    verifier = Webhook(secret)

    def receive(body: bytes, headers: dict[str, str]) -> tuple[int, dict[str, Any], int | None]:
        try:
            verifier.verify(body, headers)
        except WebhookVerificationError as exc:
            return 401, {"error": str(exc)}, None
        event = json.loads(body)
        delivery = Delivery(
            event_id=headers["webhook-id"],
            body_sha256=hashlib.sha256(body).hexdigest(),
            amount_cents=int(event["data"]["amount_cents"]),
        )
        entered = time.monotonic_ns()  # right before the handler's check: where a race starts
        status, answer = variant.process(engine, delivery)
        return status, answer, entered

    async def hooks(request: Request) -> JSONResponse:
        from starlette.concurrency import run_in_threadpool

        body = await request.body()
        status, answer, entered = await run_in_threadpool(receive, body, dict(request.headers))
        # When the delivery entered the handler (as the fixture says it): a burst's arrival spread.
        headers = {ENTERED_HEADER: str(entered)} if entered is not None else None
        return JSONResponse(answer, status_code=status, headers=headers)

    def count(event_id: str) -> int:
        with engine.connect() as conn:
            return int(conn.execute(text(EFFECTS_QUERY), {"event_id": event_id}).scalar_one())

    async def effects(request: Request) -> JSONResponse:
        from starlette.concurrency import run_in_threadpool

        return JSONResponse({"count": await run_in_threadpool(count, request.path_params["event_id"])})

    @asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        if warm:
            with contextlib.ExitStack() as opened:  # all at once, then back into the pool
                for _slot in range(POOL):
                    opened.enter_context(engine.connect())
        yield
        engine.dispose()

    routes = [Route("/hooks", hooks, methods=["POST"]), Route("/effects/{event_id}", effects)]
    return Starlette(routes=routes, lifespan=lifespan)
