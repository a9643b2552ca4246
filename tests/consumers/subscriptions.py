"""A Stripe subscription store (Flask under gunicorn, several workers), kept the way billing libraries keep one.

Every ``customer.subscription.*`` event carries the whole subscription (``data.object``); the
store keeps its ``status``. Stripe does not deliver events in the order they were created, and
its ``created`` has one-second resolution, so how the store decides whether an event is newer
than what it holds is the whole story (``SUBS_MODE``):

* ``arrival``: writes every event's status as it arrives — a late
  ``customer.subscription.created`` takes an active subscription back to ``incomplete``
  (Laravel Cashier #1201, the pay gem #282, Ghost Members #240);
* ``watermark-ge``: keeps the ``created`` of the newest event applied and applies an event
  whose ``created`` is ``>=`` it: events of one second in the wrong order still win;
* ``correct``: applies an event only when it is newer — a later second, or the same second
  and a later step of the subscription's lifecycle (created, updated, deleted).

It never creates its tables itself (``python -m tests.consumers.subscriptions migrate``, the
target spec's ``setup:``); everything comes from the environment::

    SUBS_DB_URL=sqlite:////tmp/x/subs.db python -m tests.consumers.subscriptions migrate
    SUBS_DB_URL=... SUBS_MODE=correct ACKLAB_TEST_STRIPE_SECRET=whsec_... \\
        python -m gunicorn --workers 2 --bind 127.0.0.1:9000 'tests.consumers.subscriptions:create_app()'
"""

from __future__ import annotations

import os
import sys
from typing import Any

import stripe
from flask import Flask, request
from sqlalchemy import BigInteger, Column, MetaData, String, Table, create_engine, insert, select, update
from sqlalchemy.engine import Connection, Engine

MODES = ("arrival", "watermark-ge", "correct")
LIFECYCLE = (
    "customer.subscription.created",
    "customer.subscription.updated",
    "customer.subscription.deleted",
)
metadata = MetaData()
subscriptions = Table(
    "subscriptions",
    metadata,
    Column("stripe_id", String(64), primary_key=True),
    Column("customer", String(64), nullable=False),
    Column("status", String(32), nullable=False),
    Column("event_created", BigInteger, nullable=False),
    Column("event_type", String(64), nullable=False),
)
COUNT_QUERY = "SELECT count(*) FROM subscriptions WHERE stripe_id = :object_id"
STATE_QUERY = "SELECT status FROM subscriptions WHERE stripe_id = :object_id"


def _engine() -> Engine:
    url = os.environ["SUBS_DB_URL"]
    return create_engine(url, connect_args={"timeout": 30} if url.startswith("sqlite") else {})


def migrate() -> None:
    metadata.create_all(_engine())


def newer(mode: str, stored: Any, created: int, kind: str) -> bool:
    """Whether an event (`created`, `kind`) should overwrite the `stored` row."""
    if mode == "arrival":
        return True
    if mode == "watermark-ge":
        return created >= stored.event_created
    if created != stored.event_created:
        return created > stored.event_created
    return LIFECYCLE.index(kind) > LIFECYCLE.index(stored.event_type)


def apply(conn: Connection, mode: str, event: Any) -> str:
    sub = event["data"]["object"]
    created, kind = int(event["created"]), str(event["type"])
    values = {
        "customer": sub["customer"],
        "status": sub["status"],
        "event_created": created,
        "event_type": kind,
    }
    query = select(subscriptions).where(subscriptions.c.stripe_id == sub["id"])
    if conn.dialect.name == "postgresql":
        query = query.with_for_update()
    stored = conn.execute(query).first()
    if stored is None:
        conn.execute(insert(subscriptions).values(stripe_id=sub["id"], **values))
        return "created"
    if not newer(mode, stored, created, kind):
        return "stale"
    conn.execute(update(subscriptions).where(subscriptions.c.stripe_id == sub["id"]).values(**values))
    return "updated"


def create_app() -> Flask:
    mode = os.environ.get("SUBS_MODE", "correct")
    if mode not in MODES:
        raise SystemExit(f"subscriptions: SUBS_MODE={mode!r}; expected one of {', '.join(MODES)}")
    engine = _engine()
    secret = os.environ["ACKLAB_TEST_STRIPE_SECRET"]
    app = Flask(__name__)

    @app.post("/stripe/webhooks")
    def webhook() -> tuple[dict[str, Any], int]:
        try:
            event = stripe.Webhook.construct_event(
                request.get_data(), request.headers.get("Stripe-Signature"), secret
            )
        except (ValueError, stripe.SignatureVerificationError):
            return {"error": "invalid signature"}, 400
        if event["type"] not in LIFECYCLE:
            return {"ignored": event["type"]}, 200
        with engine.begin() as conn:
            outcome = apply(conn, mode, event)
        return {"received": True, "subscription": outcome}, 200

    @app.get("/health")
    def health() -> tuple[dict[str, str], int]:
        return {"status": "ok", "mode": mode}, 200

    return app


if __name__ == "__main__" and sys.argv[1:] == ["migrate"]:
    migrate()
