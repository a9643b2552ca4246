"""A Stripe consumer init has never seen: payments keyed by the PaymentIntent id, served by
gunicorn with two uvicorn workers (a separately started service: `acklab init --url`).

It verifies signatures with Stripe's own library and records ``payment_intent.succeeded``
as one row of ``payments`` per intent; ``stripe_events`` logs the event ids it processed.
``PAYMENTS_DEDUPE=none`` skips the check (the bug: a retried event pays twice); otherwise the
event id is claimed in the payment's own transaction, and a different body under a known id
is answered 409.

    PAYMENTS_DB=/tmp/p.db STRIPE_WEBHOOK_SECRET=whsec_... \\
      gunicorn -k uvicorn.workers.UvicornWorker -w 2 -b 127.0.0.1:9000 tests.init.payments_shop:app
"""

from __future__ import annotations

import hashlib
import os
import sqlite3

import stripe
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

SCHEMA = (
    "CREATE TABLE IF NOT EXISTS stripe_events (id TEXT PRIMARY KEY, body_sha256 TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS customers (id INTEGER PRIMARY KEY, email TEXT)",
    "CREATE TABLE IF NOT EXISTS payments (pk INTEGER PRIMARY KEY AUTOINCREMENT, intent TEXT NOT NULL, "
    "amount INTEGER NOT NULL, currency TEXT NOT NULL, status TEXT NOT NULL)",
)


def connect() -> sqlite3.Connection:
    conn = sqlite3.connect(os.environ["PAYMENTS_DB"], timeout=30, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    return conn


with connect() as _conn:
    for _statement in SCHEMA:
        _conn.execute(_statement)
    if not _conn.execute("SELECT 1 FROM customers").fetchone():
        _conn.execute("INSERT INTO customers (email) VALUES ('jenny.rosen@example.com')")


async def hook(request: Request) -> JSONResponse:
    body = await request.body()
    try:
        event = stripe.Webhook.construct_event(
            body, request.headers.get("stripe-signature", ""), os.environ["STRIPE_WEBHOOK_SECRET"]
        )
    except (ValueError, stripe.SignatureVerificationError):
        return JSONResponse({"error": "bad signature"}, status_code=400)
    intent = event["data"]["object"]
    digest = hashlib.sha256(body).hexdigest()
    conn = connect()
    try:
        conn.execute("BEGIN IMMEDIATE")
        if os.environ.get("PAYMENTS_DEDUPE", "claim") == "claim":
            seen = conn.execute(
                "SELECT body_sha256 FROM stripe_events WHERE id = ?", (event["id"],)
            ).fetchone()
            if seen:
                conn.execute("ROLLBACK")
                status = 200 if seen[0] == digest else 409
                return JSONResponse({"status": "duplicate"}, status_code=status)
            conn.execute("INSERT INTO stripe_events VALUES (?, ?)", (event["id"], digest))
        else:
            conn.execute("INSERT OR IGNORE INTO stripe_events VALUES (?, ?)", (event["id"], digest))
        conn.execute(
            "INSERT INTO payments (intent, amount, currency, status) VALUES (?, ?, ?, 'paid')",
            (intent["id"], intent["amount"], intent["currency"]),
        )
        conn.execute("COMMIT")
    finally:
        conn.close()
    return JSONResponse({"status": "paid"})


async def health(request: Request) -> JSONResponse:
    return JSONResponse({"ok": True})


app = Starlette(routes=[Route("/stripe/webhook", hook, methods=["POST"]), Route("/health", health)])
