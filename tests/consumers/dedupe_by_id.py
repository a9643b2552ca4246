"""A Stripe receiver that dedupes by event id, on the standard library alone.

Stripe's documentation: "guard against duplicated event receipts by logging the event IDs
you've processed, and then not processing already-logged events" — and answer 2xx to them,
so Stripe stops retrying. A body that differs under a known id is therefore acknowledged
too. ``--mode ignore`` changes nothing for it (correct under ``expect.conflict: ignore``);
``--mode overwrite`` keeps one order row but stores the new amount — the state changed.

    python -m tests.consumers.dedupe_by_id --port 9000 --db /tmp/orders.sqlite --mode ignore
"""

from __future__ import annotations

import argparse
import os
import sqlite3
from http.server import ThreadingHTTPServer

import stripe

from tests.consumers.json_http import JsonHandler

SCHEMA = (
    "CREATE TABLE IF NOT EXISTS processed_events (event_id TEXT PRIMARY KEY)",
    "CREATE TABLE IF NOT EXISTS orders (id INTEGER PRIMARY KEY, event_id TEXT NOT NULL, "
    "order_id TEXT NOT NULL, amount_cents INTEGER NOT NULL)",
)
EFFECTS_QUERY = "SELECT count(*) FROM orders WHERE event_id = :event_id"
STATE_QUERY = "SELECT order_id, amount_cents FROM orders WHERE event_id = :event_id"


def connect(path: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, timeout=30, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    return conn


class Handler(JsonHandler):
    db_path = ""
    secret = ""
    mode = "ignore"

    def do_POST(self) -> None:
        payload = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        try:
            event = stripe.Webhook.construct_event(payload, self.headers.get("Stripe-Signature"), self.secret)
        except (ValueError, stripe.SignatureVerificationError):
            self.answer(400, {"error": "invalid signature"})
            return
        data = event["data"]["object"]
        conn = connect(self.db_path)
        try:
            conn.execute("BEGIN IMMEDIATE")
            known = conn.execute(
                "SELECT 1 FROM processed_events WHERE event_id = ?", (event["id"],)
            ).fetchone()
            if known is None:
                conn.execute("INSERT INTO processed_events (event_id) VALUES (?)", (event["id"],))
                conn.execute(
                    "INSERT INTO orders (event_id, order_id, amount_cents) VALUES (?, ?, ?)",
                    (event["id"], data["order_id"], data["amount_cents"]),
                )
            elif self.mode == "overwrite":
                conn.execute(
                    "UPDATE orders SET amount_cents = ? WHERE event_id = ?",
                    (data["amount_cents"], event["id"]),
                )
            conn.execute("COMMIT")
        finally:
            conn.close()
        self.answer(200, {"received": True})


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--db", required=True, help="SQLite file")
    parser.add_argument("--mode", choices=("ignore", "overwrite"), required=True)
    args = parser.parse_args()
    conn = connect(args.db)
    for statement in SCHEMA:
        conn.execute(statement)
    conn.close()
    Handler.db_path, Handler.mode = args.db, args.mode
    Handler.secret = os.environ["ACKLAB_TEST_STRIPE_SECRET"]
    ThreadingHTTPServer(("127.0.0.1", args.port), Handler).serve_forever()


if __name__ == "__main__":
    main()
