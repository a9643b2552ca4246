"""An ack-then-process consumer: answer 2xx at once, do the work in a background task.

Stripe's and GitHub's own advice ("respond quickly, process asynchronously"), written as
FastAPI's documentation shows it: the route verifies the Standard Webhooks signature, hands
the event to ``BackgroundTasks`` and returns; the task writes the payment row 50-500 ms
after the response has gone out.

``--mode duplicates`` processes every delivery it gets (a retry is a second payment);
``--mode correct`` claims the event id with a unique receipt *before* answering, so a retry
or a concurrent duplicate is acknowledged without a second task, and a different body under
a used id gets 409.

``--hold`` makes the timing the lab's own: an event's row waits until a delivery of another
event arrives (at most HOLD_S), so with two trials the first one is judged before its row
exists and the end-of-run re-read after it — whatever the machine's load.

    python -m tests.consumers.ack_then_process --port 9000 --db sqlite:////tmp/shop.db --mode correct
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import threading
import time
from typing import Annotated

import uvicorn
from fastapi import BackgroundTasks, FastAPI, Header, Request, Response
from sqlalchemy import Column, Integer, MetaData, String, Table, create_engine, func, select
from sqlalchemy.exc import IntegrityError
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

metadata = MetaData()
receipts = Table(
    "receipts",
    metadata,
    Column("event_id", String(64), primary_key=True),
    Column("body_sha256", String(64), nullable=False),
)
payments = Table(
    "payments",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("event_id", String(64), nullable=False, index=True),
    Column("amount_cents", Integer, nullable=False),
)
EFFECTS_QUERY = "SELECT count(*) FROM payments WHERE event_id = :event_id"
WORK_S = (0.05, 0.5)
HOLD_S = 20.0


def create_app(
    db_url: str, secret: str, mode: str, work_s: tuple[float, float] = WORK_S, *, hold: bool = False
) -> FastAPI:
    connect_args = {"timeout": 30} if db_url.startswith("sqlite") else {}
    engine = create_engine(db_url, connect_args=connect_args, pool_size=20, max_overflow=20)
    metadata.create_all(engine)
    verifier = Webhook(secret)
    app = FastAPI()
    arrived: dict[str, threading.Event] = {}  # --hold: set once another event's delivery came
    lock = threading.Lock()

    def record_payment(event_id: str, amount_cents: int) -> None:
        # The slow part of the work (a call to the payment provider), then the row.
        if hold:
            arrived[event_id].wait(HOLD_S)
        time.sleep(random.uniform(*work_s))
        with engine.begin() as conn:
            conn.execute(payments.insert().values(event_id=event_id, amount_cents=amount_cents))

    @app.post("/webhooks/payments")
    async def receive(
        request: Request,
        tasks: BackgroundTasks,
        webhook_id: Annotated[str, Header()],
    ) -> Response:
        body = await request.body()
        try:
            verifier.verify(body, dict(request.headers))
        except WebhookVerificationError:
            return Response(status_code=401)
        event = json.loads(body)
        with lock:
            for held, other in arrived.items():
                if held != webhook_id:
                    other.set()
            arrived.setdefault(webhook_id, threading.Event())
        if mode == "correct":
            digest = hashlib.sha256(body).hexdigest()
            try:
                with engine.begin() as conn:
                    conn.execute(receipts.insert().values(event_id=webhook_id, body_sha256=digest))
            except IntegrityError:
                with engine.connect() as conn:
                    stored = conn.execute(
                        select(receipts.c.body_sha256).where(receipts.c.event_id == webhook_id)
                    ).scalar_one()
                return Response(status_code=200 if stored == digest else 409)
        tasks.add_task(record_payment, webhook_id, int(event["data"]["amount_cents"]))
        return Response(status_code=202)

    @app.get("/payments/{event_id}")
    def count(event_id: str) -> dict[str, int]:
        with engine.connect() as conn:
            n = conn.execute(
                select(func.count()).select_from(payments).where(payments.c.event_id == event_id)
            ).scalar_one()
        return {"count": n}

    return app


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--db", required=True)
    parser.add_argument("--mode", choices=("duplicates", "correct"), required=True)
    parser.add_argument("--work-s", type=float, nargs=2, default=WORK_S, metavar=("MIN", "MAX"))
    parser.add_argument("--hold", action="store_true", help="write a row once another event arrives")
    args = parser.parse_args()
    secret = os.environ["ACKLAB_TEST_WEBHOOK_SECRET"]
    app = create_app(args.db, secret, args.mode, tuple(args.work_s), hold=args.hold)
    # A held row (the last event's: none followed it) must not keep SIGTERM waiting.
    uvicorn.run(
        app,
        host="127.0.0.1",
        port=args.port,
        log_level="warning",
        timeout_graceful_shutdown=1 if args.hold else None,
    )


if __name__ == "__main__":
    main()
