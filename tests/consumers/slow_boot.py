"""A service that listens at once but answers 503 until it has booted, after every start.

Like a publishing platform in maintenance mode while it migrates and warms up: the port
accepts connections within half a second, yet every request gets 503 "We'll be right back"
for ``boot_s``. It reads its configuration from ``slow_boot.json`` in its working directory
(``{"db": ..., "variant": ..., "boot_s": ...}``), verifies Stripe signatures, stores a payment
row and, after committing, e-mails the staff (300 ms) before it answers.

* ``no-dedupe``: every delivery of an event stores another payment and e-mails again;
* ``receipt``: a unique receipt in the same transaction: a retry is acknowledged, not stored;
* ``fails-after-commit``: like ``no-dedupe``, but the e-mail step fails after the commit
  and the answer is a 500 — so the provider retries, and each retry stores another row.

    cd site && python -m tests.consumers.slow_boot --port 9000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from pathlib import Path

import stripe
import uvicorn
from sqlalchemy import Column, Integer, MetaData, String, Table, create_engine
from sqlalchemy.exc import IntegrityError
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

metadata = MetaData()
receipts = Table("receipts", metadata, Column("event_id", String(64), primary_key=True))
payments = Table(
    "payments",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("event_id", String(64), nullable=False),
    Column("amount_cents", Integer, nullable=False),
)
EFFECTS_QUERY = "SELECT count(*) FROM payments WHERE event_id = :event_id"
EMAIL_S = 0.3


class Maintenance:
    """503 for every request until `boot_s` after the process started."""

    def __init__(self, app: ASGIApp, boot_s: float) -> None:
        self.app, self.ready_at = app, time.monotonic() + boot_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and time.monotonic() < self.ready_at:
            await PlainTextResponse("We'll be right back", status_code=503)(scope, receive, send)
            return
        await self.app(scope, receive, send)


def create_app(config: dict[str, object], secret: str) -> ASGIApp:
    db_url = str(config["db"])
    variant = str(config["variant"])
    engine = create_engine(db_url, connect_args={"timeout": 30} if db_url.startswith("sqlite") else {})
    metadata.create_all(engine)

    def store(event_id: str, amount: int) -> bool:
        """True: a new payment was stored."""
        try:
            with engine.begin() as conn:
                if variant == "receipt":
                    conn.execute(receipts.insert().values(event_id=event_id))
                conn.execute(payments.insert().values(event_id=event_id, amount_cents=amount))
        except IntegrityError:
            return False
        return True

    async def webhook(request: Request) -> Response:
        payload = await request.body()
        try:
            event = stripe.Webhook.construct_event(payload, request.headers.get("Stripe-Signature"), secret)
        except (ValueError, stripe.SignatureVerificationError):
            return JSONResponse({"error": "invalid signature"}, status_code=400)
        stored = await run_in_threadpool(store, event["id"], int(event["data"]["object"]["amount_cents"]))
        if stored:
            await asyncio.sleep(EMAIL_S)  # e-mail the staff about the new payment
            if variant == "fails-after-commit":
                return JSONResponse({"error": "could not send the staff e-mail"}, status_code=500)
        return JSONResponse({"received": True})

    async def health(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    routes = [Route("/webhooks/stripe", webhook, methods=["POST"]), Route("/health", health)]
    return Maintenance(Starlette(routes=routes), float(str(config.get("boot_s", 3))))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    config = json.loads(Path("slow_boot.json").read_text())  # from the working directory
    app = create_app(config, os.environ["ACKLAB_TEST_STRIPE_SECRET"])
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
