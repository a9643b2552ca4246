"""A shop's order webhook in Flask, with the dedupe bug Flask users write: look the event up,
call the payment provider, then record it. Two overlapping deliveries of one event both
pass the look-up."""

from __future__ import annotations

import sqlite3
import time

from flask import Flask, abort, request
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"


def count_fulfillments(db_path: str, event_id: str) -> int:
    with sqlite3.connect(db_path) as conn:
        (count,) = conn.execute(
            "SELECT count(*) FROM fulfillments WHERE event_id = ?", (event_id,)
        ).fetchone()
    return int(count)


def create_app(db_path: str) -> Flask:
    with sqlite3.connect(db_path) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS fulfillments (event_id TEXT, amount_cents INTEGER)")
    app = Flask(__name__)
    verifier = Webhook(SECRET)

    @app.post("/hooks/orders")
    def orders() -> dict[str, str]:
        body = request.get_data()
        try:
            event = verifier.verify(body, dict(request.headers))
        except WebhookVerificationError:
            abort(401)
        with sqlite3.connect(db_path, timeout=30) as conn:
            seen = conn.execute("SELECT 1 FROM fulfillments WHERE event_id = ?", (event["id"],)).fetchone()
        if seen:
            return {"status": "duplicate"}
        time.sleep(0.02)  # the payment provider's API
        with sqlite3.connect(db_path, timeout=30) as conn:
            conn.execute(
                "INSERT INTO fulfillments VALUES (?, ?)", (event["id"], event["data"]["amount_cents"])
            )
        return {"status": "fulfilled"}

    return app
