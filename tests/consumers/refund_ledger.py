"""A ledger of partial refunds kept from Stripe's ``charge.refunded`` events (the standard library's ``http.server``).

Each ``charge.refunded`` carries the charge's *cumulative* ``amount_refunded``; the shop keeps one
row per refund in ``refunds`` and the customer's balance is their sum. Every event is processed
once (its id is kept). What the shop books for an event is the difference between the modes:

* ``add-cumulative``: the event's ``amount_refunded`` — a charge refunded 300 then 700 in all books
  300 + 700 = 1000, and a reorder books more (anomalyco/opencode #28398, useautumn/autumn #3438);
* ``difference``: what the event's total adds to what is booked for the charge, never below
  zero (an older event arriving late books nothing): the sum is the newest total (correct).

    python -m tests.consumers.refund_ledger --port 9000 --db /tmp/l.sqlite --mode difference
"""

from __future__ import annotations

import json
import os
import sqlite3

import stripe

from tests.consumers.stripe_hooks import ModeHandler, serve

SCHEMA = (
    "CREATE TABLE IF NOT EXISTS processed (event_id TEXT PRIMARY KEY);"
    "CREATE TABLE IF NOT EXISTS refunds (event_id TEXT NOT NULL, charge_id TEXT NOT NULL, amount INTEGER NOT NULL)"
)


class Handler(ModeHandler):
    def do_POST(self) -> None:
        payload = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        try:
            stripe.WebhookSignature.verify_header(
                payload, self.headers.get("Stripe-Signature"), os.environ["ACKLAB_TEST_STRIPE_SECRET"], 300
            )
        except stripe.SignatureVerificationError:
            self.answer(400, {})
            return
        event = json.loads(payload)
        if event.get("type") != "charge.refunded":
            self.answer(200, {})
            return
        charge = event["data"]["object"]
        conn = self.connect()
        try:
            conn.execute("BEGIN IMMEDIATE")  # one booking at a time: duplicates and reorders race here
            if conn.execute("INSERT OR IGNORE INTO processed VALUES (?)", (event["id"],)).rowcount:
                booked = conn.execute(
                    "SELECT coalesce(sum(amount), 0) FROM refunds WHERE charge_id = ?", (charge["id"],)
                ).fetchone()[0]
                total = int(charge["amount_refunded"])
                amount = total if self.mode == "add-cumulative" else max(total - booked, 0)
                if amount:
                    conn.execute("INSERT INTO refunds VALUES (?, ?, ?)", (event["id"], charge["id"], amount))
            conn.execute("COMMIT")
        except sqlite3.Error:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            self.answer(500, {})
            return
        finally:
            conn.close()
        self.answer(200, {})


if __name__ == "__main__":
    serve(Handler, modes=("add-cumulative", "difference"), schema=SCHEMA)
