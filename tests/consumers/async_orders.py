"""An order consumer written with FastAPI's ``async def`` routes and the standard library's sqlite3.

Each delivery claims its event id and writes one fulfilment in one ``BEGIN IMMEDIATE``
transaction, with an awaited call in the middle (the stock service, say). How it runs that
SQL is what the modes differ in — each is a way people write it:

* ``blocking``: the SQL runs right in the ``async def`` route, on the event loop. Under a
  burst, a second request blocks the loop in ``BEGIN IMMEDIATE`` while the first, holding the
  write lock, waits for the loop to give it back its awaited call: nobody answers until
  SQLite's busy timeout (a minute) ends.
* ``thread``: the same SQL in a worker thread (``asyncio.to_thread``); the loop stays free.
* ``never-answers``: processes the event, then never sends a response (a stuck ``await``).
* ``duplicate-500``: a duplicate hits the unique event id and the unhandled IntegrityError is
  answered 500, by FastAPI's default, every time the provider retries.

    python -m tests.consumers.async_orders --port 9000 --db /tmp/orders.sqlite --mode thread
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sqlite3
import time

import uvicorn
from fastapi import FastAPI, Request, Response
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

EFFECTS_QUERY = "SELECT count(*) FROM fulfilments WHERE event_id = :event_id"
STOCK_CALL_S = 0.05
BUSY_TIMEOUT_S = 60.0


def _schema(path: str) -> None:
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE IF NOT EXISTS claims (event_id TEXT PRIMARY KEY)")
    conn.execute("CREATE TABLE IF NOT EXISTS fulfilments (id INTEGER PRIMARY KEY, event_id TEXT NOT NULL)")
    conn.close()


def create_app(path: str, secret: str, mode: str) -> FastAPI:
    _schema(path)
    verifier = Webhook(secret)
    app = FastAPI()

    def connect() -> sqlite3.Connection:
        return sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False)

    def claim(conn: sqlite3.Connection, event_id: str) -> bool:
        conn.execute("BEGIN IMMEDIATE")
        if conn.execute("SELECT 1 FROM claims WHERE event_id = ?", (event_id,)).fetchone():
            conn.execute("ROLLBACK")
            return False
        conn.execute("INSERT INTO claims (event_id) VALUES (?)", (event_id,))
        return True

    def fulfil(conn: sqlite3.Connection, event_id: str) -> None:
        conn.execute("INSERT INTO fulfilments (event_id) VALUES (?)", (event_id,))
        conn.execute("COMMIT")

    def in_thread(event_id: str) -> None:
        conn = connect()
        try:
            if claim(conn, event_id):
                time.sleep(STOCK_CALL_S)  # the stock call, in this worker thread
                fulfil(conn, event_id)
        finally:
            conn.close()

    @app.post("/orders")
    async def receive(request: Request) -> Response:
        body = await request.body()
        try:
            verifier.verify(body, dict(request.headers))
        except WebhookVerificationError:
            return Response(status_code=401)
        event_id = request.headers["webhook-id"]
        if mode == "thread":
            await asyncio.to_thread(in_thread, event_id)
            return Response(status_code=200)
        conn = connect()
        try:
            if mode == "duplicate-500":
                # No claim check: the unique id refuses a duplicate, and nothing catches it.
                conn.execute("BEGIN IMMEDIATE")
                conn.execute("INSERT INTO claims (event_id) VALUES (?)", (event_id,))
                fulfil(conn, event_id)
                return Response(status_code=200)
            if claim(conn, event_id):
                await asyncio.sleep(STOCK_CALL_S)  # the stock call, awaited with the write lock held
                fulfil(conn, event_id)
        finally:
            conn.close()
        if mode == "never-answers":
            await asyncio.Event().wait()  # a stuck await: the response never starts
        return Response(status_code=200)

    return app


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--db", required=True, help="SQLite file")
    parser.add_argument(
        "--mode", choices=("blocking", "thread", "never-answers", "duplicate-500"), required=True
    )
    args = parser.parse_args()
    app = create_app(args.db, os.environ["ACKLAB_TEST_WEBHOOK_SECRET"], args.mode)
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
