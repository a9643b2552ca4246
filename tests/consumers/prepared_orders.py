"""A shop that acts only on payments for orders it created itself (as pretix does): an event about
an order it does not know is acknowledged and ignored.

``POST /api/orders`` (``{"code": ..., "total_cents": ...}``) creates an order, as the shop's checkout
does; ``POST /hooks`` (Standard Webhooks, ``payment.succeeded``) fulfils the order the event names —
once per event id, the claim and the fulfilment in one transaction (correct).

    python -m tests.consumers.prepared_orders --port 9000 --db /tmp/orders.sqlite
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
from http.server import ThreadingHTTPServer

from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

from tests.consumers.json_http import JsonHandler


class Handler(JsonHandler):
    db_path = ""
    verifier: Webhook

    def connect(self) -> sqlite3.Connection:
        return sqlite3.connect(self.db_path, timeout=30, isolation_level=None)

    def do_GET(self) -> None:
        self.answer(200 if self.path == "/health" else 404, {"status": "ok"})

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self.path == "/api/orders":
            order = json.loads(body)
            conn = self.connect()
            try:
                conn.execute("INSERT INTO orders (code, status) VALUES (?, 'pending')", (order["code"],))
            finally:
                conn.close()
            self.answer(201, {"code": order["code"], "status": "pending"})
            return
        if self.path != "/hooks":
            self.answer(404, {"error": "no route"})
            return
        try:
            event = self.verifier.verify(body, {k.lower(): v for k, v in self.headers.items()})
        except WebhookVerificationError:
            self.answer(401, {"error": "signature"})
            return
        conn = self.connect()
        try:
            conn.execute("BEGIN IMMEDIATE")
            known = conn.execute(
                "SELECT 1 FROM orders WHERE code = ?", (event["data"]["order_id"],)
            ).fetchone()
            claimed = conn.execute("SELECT 1 FROM fulfillments WHERE event_id = ?", (event["id"],)).fetchone()
            if known and not claimed:
                conn.execute(
                    "INSERT INTO fulfillments (event_id, code) VALUES (?, ?)",
                    (event["id"], event["data"]["order_id"]),
                )
                conn.execute("UPDATE orders SET status = 'paid' WHERE code = ?", (event["data"]["order_id"],))
            conn.execute("COMMIT")
        finally:
            conn.close()
        self.answer(200, {"status": "ok" if known else "unknown order: ignored"})


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--db", required=True)
    args = parser.parse_args()
    conn = sqlite3.connect(args.db)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE IF NOT EXISTS orders (code TEXT PRIMARY KEY, status TEXT NOT NULL)")
    conn.execute("CREATE TABLE IF NOT EXISTS fulfillments (event_id TEXT PRIMARY KEY, code TEXT NOT NULL)")
    conn.close()
    Handler.db_path = args.db
    Handler.verifier = Webhook(os.environ["ACKLAB_TEST_WEBHOOK_SECRET"])
    ThreadingHTTPServer(("127.0.0.1", args.port), Handler).serve_forever()


if __name__ == "__main__":
    main()
