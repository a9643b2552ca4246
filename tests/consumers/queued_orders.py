"""A Stripe consumer behind a queue: the handler verifies, enqueues and answers; a worker fulfils.

The handler (``python -m tests.consumers.queued_orders --port P``) enqueues with the library
``ACKLAB_TEST_QUEUE`` names — ``celery`` (`tests.consumers.celery_orders`), ``rq``, ``dramatiq``
(`tests.consumers.dramatiq_orders`), or ``list``: a plain Redis list that `list_worker` pops with
``BRPOP``, recording the job nowhere while it works — and answers 200 once the job is in the queue.
When the enqueue fails it answers ``ACKLAB_TEST_ON_ENQUEUE_ERROR``: ``503`` (the provider retries)
or ``200`` (the mistake: the event is acknowledged and its job never existed).

The job (`fulfil`) asks the provider first (``ACKLAB_TEST_BEFORE_S`` of work, none by default), makes
the effect, a fulfilment row, then tells the warehouse (``ACKLAB_TEST_AFTER_S``
of work after the effect, before the job returns and is acknowledged). ``ACKLAB_TEST_EFFECT``:
``insert`` (the mistake: a redelivered job fulfils again) or ``keyed`` (a processed-events row
keyed by the event id, in the same transaction: a redelivered job changes nothing).
"""

from __future__ import annotations

import argparse
import os
import time
from http.server import ThreadingHTTPServer
from typing import Any

from sqlalchemy import Engine, create_engine, text
from sqlalchemy.exc import IntegrityError

from tests.consumers.json_http import JsonHandler

SCHEMA = (
    "CREATE TABLE IF NOT EXISTS processed_events (event_id VARCHAR(200) PRIMARY KEY)",
    "CREATE TABLE IF NOT EXISTS fulfilments (event_id VARCHAR(200) NOT NULL, order_id VARCHAR(200) NOT NULL)",
)
_ENGINE: list[Engine] = []
LIST_KEY = "orders:jobs"  # the plain list (ACKLAB_TEST_QUEUE=list)


def engine() -> Engine:
    if not _ENGINE:
        _ENGINE.append(create_engine(os.environ["ACKLAB_TEST_DB_URL"], connect_args={"timeout": 15}))
    return _ENGINE[0]


def migrate() -> None:
    with engine().begin() as conn:
        conn.exec_driver_sql("PRAGMA journal_mode=WAL")
        for statement in SCHEMA:
            conn.execute(text(statement))


def fulfil(event_id: str, order_id: str) -> str:
    """The job: the work before, one fulfilment (keyed by the event id, or not), then the work after it."""
    time.sleep(float(os.environ.get("ACKLAB_TEST_BEFORE_S", "0")))  # the provider's API, asked first
    try:
        with engine().begin() as conn:
            if os.environ.get("ACKLAB_TEST_EFFECT", "insert") == "keyed":
                conn.execute(text("INSERT INTO processed_events (event_id) VALUES (:e)"), {"e": event_id})
            conn.execute(
                text("INSERT INTO fulfilments (event_id, order_id) VALUES (:e, :o)"),
                {"e": event_id, "o": order_id},
            )
    except IntegrityError:
        return "duplicate"
    time.sleep(float(os.environ.get("ACKLAB_TEST_AFTER_S", "0.3")))  # the warehouse call
    return "fulfilled"


def enqueue(event_id: str, order_id: str) -> None:
    kind = os.environ["ACKLAB_TEST_QUEUE"]
    if kind == "celery":
        from tests.consumers.celery_orders import app

        app.send_task("orders.fulfil", args=[event_id, order_id], retry=False)
    elif kind == "rq":
        from redis import Redis
        from rq import Queue

        Queue("orders", connection=Redis.from_url(os.environ["REDIS_URL"])).enqueue(
            "tests.consumers.queued_orders.fulfil", event_id, order_id
        )
    elif kind == "list":
        import json

        from redis import Redis

        job = json.dumps({"event_id": event_id, "order_id": order_id})
        Redis.from_url(os.environ["REDIS_URL"]).lpush(LIST_KEY, job)
    else:
        from tests.consumers.dramatiq_orders import fulfil_job

        fulfil_job.send(event_id, order_id)


class Handler(JsonHandler):
    def do_POST(self) -> None:
        import stripe

        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path != "/stripe":
            self.answer(404, {"error": "no such route"})
            return
        secret = os.environ["ACKLAB_TEST_STRIPE_SECRET"]
        try:
            event: Any = stripe.Webhook.construct_event(
                body, self.headers.get("Stripe-Signature", ""), secret
            )
        except (ValueError, stripe.SignatureVerificationError):
            self.answer(400, {"error": "invalid signature"})
            return
        if event["type"] != "payment_intent.succeeded":
            self.answer(200, {"ignored": event["type"]})
            return
        try:
            enqueue(event["id"], event["data"]["object"]["order_id"])
        except Exception as exc:  # the broker's refusal, whatever the library calls it
            status = int(os.environ.get("ACKLAB_TEST_ON_ENQUEUE_ERROR", "503"))
            self.answer(status, {"error": f"enqueue failed: {type(exc).__name__}"})
            return
        self.answer(200, {"queued": True})


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    ThreadingHTTPServer(("127.0.0.1", args.port), Handler).serve_forever()


if __name__ == "__main__":
    main()
