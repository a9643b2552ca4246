"""An answers-first consumer: 202 at once, the fulfilment written by a worker thread afterwards.

How it keeps the work it acknowledged is the mode:

* ``memory``: an in-process ``queue.Queue`` (the "respond quickly, process asynchronously"
  advice taken literally): acknowledged work dies with the process.
* ``durable``: the event is committed to an ``inbox`` table before the 202, and the worker
  takes pending inbox rows — on restart too — fulfilling and marking each in one transaction.

Either way a duplicate of a received id is acknowledged and not queued again.

    python -m tests.consumers.answers_first --port 9000 --db /tmp/inbox.sqlite --mode durable
"""

from __future__ import annotations

import argparse
import os
import queue
import sqlite3
import threading
import time

import uvicorn
from fastapi import FastAPI, Request, Response
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

WORK_S = 0.3  # the work the 202 promised (a call to the shipping provider)
POLL_S = 0.05


def connect(path: str) -> sqlite3.Connection:
    return sqlite3.connect(path, timeout=30, isolation_level=None, check_same_thread=False)


def create_app(path: str, secret: str, mode: str) -> FastAPI:
    db = connect(path)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute(
        "CREATE TABLE IF NOT EXISTS inbox (event_id TEXT PRIMARY KEY, done INTEGER NOT NULL DEFAULT 0)"
    )
    db.execute("CREATE TABLE IF NOT EXISTS fulfilments (id INTEGER PRIMARY KEY, event_id TEXT NOT NULL)")
    db.close()
    verifier = Webhook(secret)
    work: queue.Queue[str] = queue.Queue()
    seen: set[str] = set()
    lock = threading.Lock()

    def fulfil(event_id: str) -> None:
        time.sleep(WORK_S)
        conn = connect(path)
        try:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("INSERT INTO fulfilments (event_id) VALUES (?)", (event_id,))
            conn.execute("UPDATE inbox SET done = 1 WHERE event_id = ?", (event_id,))
            conn.execute("COMMIT")
        finally:
            conn.close()

    def worker() -> None:
        while True:
            if mode == "memory":
                fulfil(work.get())
                continue
            conn = connect(path)
            try:
                row = conn.execute("SELECT event_id FROM inbox WHERE done = 0 LIMIT 1").fetchone()
            finally:
                conn.close()
            if row is None:
                time.sleep(POLL_S)
            else:
                fulfil(row[0])

    threading.Thread(target=worker, daemon=True).start()
    app = FastAPI()

    @app.post("/shipments")
    async def receive(request: Request) -> Response:
        body = await request.body()
        try:
            verifier.verify(body, dict(request.headers))
        except WebhookVerificationError:
            return Response(status_code=401)
        event_id = request.headers["webhook-id"]
        if mode == "memory":
            with lock:
                if event_id not in seen:
                    seen.add(event_id)
                    work.put(event_id)
        else:
            conn = connect(path)
            try:
                conn.execute("INSERT OR IGNORE INTO inbox (event_id) VALUES (?)", (event_id,))
            finally:
                conn.close()
        return Response(status_code=202)

    return app


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--db", required=True, help="SQLite file")
    parser.add_argument("--mode", choices=("memory", "durable"), required=True)
    args = parser.parse_args()
    app = create_app(args.db, os.environ["ACKLAB_TEST_WEBHOOK_SECRET"], args.mode)
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
