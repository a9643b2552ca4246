"""A Stripe consumer run as several processes (gunicorn), deduping three ways (``ACKLAB_TEST_DEDUPE``):

* ``lru``: an in-memory LRU of the event ids this process has seen (a bounded OrderedDict) — right
  in one process, blind across replicas and after a restart;
* ``redis``: ``SET stripe:event:<id> 1 NX EX <ACKLAB_TEST_TTL_S>`` in the Redis the lab started
  (``REDIS_URL``) — shared by every replica, but it forgets after the TTL, while Stripe retries for
  three days;
* ``unique``: a processed-events row with the event id as its primary key, inserted in the same
  transaction as the fulfilment — a duplicate fails the insert and is acknowledged.

Every event makes one fulfilment row; a duplicate is answered 200 so Stripe stops retrying.
The database is SQLite or PostgreSQL (``ACKLAB_TEST_DB_URL``, a SQLAlchemy URL).

    ACKLAB_TEST_DB_URL=sqlite:////tmp/o.sqlite ACKLAB_TEST_DEDUPE=lru ACKLAB_TEST_STRIPE_SECRET=whsec_... \\
        python -m gunicorn --workers 1 --bind 127.0.0.1:9000 'tests.consumers.fleet_orders:create_app()'
"""

from __future__ import annotations

import json
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Any

import stripe
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.exc import IntegrityError

StartResponse = Callable[[str, list[tuple[str, str]]], Any]
LRU_SIZE = 10_000
SCHEMA = (
    "CREATE TABLE IF NOT EXISTS processed_events (event_id VARCHAR(200) PRIMARY KEY)",
    "CREATE TABLE IF NOT EXISTS fulfilments (event_id VARCHAR(200) NOT NULL, order_id VARCHAR(200) NOT NULL)",
)


def _engine() -> Engine:
    url = os.environ["ACKLAB_TEST_DB_URL"]
    return create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1))


def migrate() -> None:
    """The schema, once, before any replica starts (the spec's setup:)."""
    engine = _engine()
    with engine.begin() as conn:
        if engine.dialect.name == "sqlite":
            conn.exec_driver_sql("PRAGMA journal_mode=WAL")
        for statement in SCHEMA:
            conn.execute(text(statement))
    engine.dispose()


def create_app() -> Callable[[dict[str, Any], StartResponse], Iterable[bytes]]:
    mode, secret = os.environ["ACKLAB_TEST_DEDUPE"], os.environ["ACKLAB_TEST_STRIPE_SECRET"]
    engine = _engine()
    seen: OrderedDict[str, None] = OrderedDict()
    lock = threading.Lock()
    keys = None
    if mode == "redis":
        import redis

        keys = redis.Redis.from_url(os.environ["REDIS_URL"])
    ttl_s = int(os.environ.get("ACKLAB_TEST_TTL_S", "300"))

    def answer(start_response: StartResponse, status: str, doc: object) -> list[bytes]:
        body = json.dumps(doc).encode()
        start_response(status, [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
        return [body]

    def fulfil(event_id: str, order_id: str, *, unique: bool) -> bool:
        """One fulfilment for the event; False: a duplicate (the unique key refused it)."""
        try:
            with engine.begin() as conn:
                if unique:
                    conn.execute(text("INSERT INTO processed_events (event_id) VALUES (:e)"), {"e": event_id})
                conn.execute(
                    text("INSERT INTO fulfilments (event_id, order_id) VALUES (:e, :o)"),
                    {"e": event_id, "o": order_id},
                )
        except IntegrityError:
            return False
        return True

    def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        if environ["REQUEST_METHOD"] != "POST" or environ["PATH_INFO"] != "/stripe":
            return answer(start_response, "404 Not Found", {"error": "no such route"})
        body = environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
        try:
            event = stripe.Webhook.construct_event(body, environ.get("HTTP_STRIPE_SIGNATURE", ""), secret)
        except (ValueError, stripe.SignatureVerificationError):
            return answer(start_response, "400 Bad Request", {"error": "invalid signature"})
        if event["type"] != "payment_intent.succeeded":
            return answer(start_response, "200 OK", {"ignored": event["type"]})
        event_id, order_id = event["id"], event["data"]["object"]["order_id"]
        if mode == "lru":
            with lock:
                if event_id in seen:
                    seen.move_to_end(event_id)
                    return answer(start_response, "200 OK", {"duplicate": True})
                fulfil(event_id, order_id, unique=False)
                seen[event_id] = None
                if len(seen) > LRU_SIZE:
                    seen.popitem(last=False)
        elif mode == "redis":
            assert keys is not None
            if not keys.set(f"stripe:event:{event_id}", 1, nx=True, ex=ttl_s):
                return answer(start_response, "200 OK", {"duplicate": True})
            fulfil(event_id, order_id, unique=False)
        elif not fulfil(event_id, order_id, unique=True):
            return answer(start_response, "200 OK", {"duplicate": True})
        return answer(start_response, "200 OK", {"received": True})

    return app
