"""A plain WSGI consumer for gunicorn with several worker processes.

It claims each event with a unique receipt in the same transaction as the fulfillment, and
after committing sends the customer a confirmation e-mail (300 ms) before it answers — the
window in which a crash loses the answer of a committed delivery. A retry of a claimed event
is acknowledged without a second fulfillment.

    ACKLAB_TEST_DB_URL=postgresql+psycopg://... ACKLAB_TEST_WEBHOOK_SECRET=whsec_... \\
        python -m gunicorn --workers 2 --bind 127.0.0.1:9000 'tests.consumers.wsgi_receipts:create_app()'
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from collections.abc import Callable, Iterable
from typing import Any

from sqlalchemy import Column, Integer, MetaData, String, Table, create_engine
from sqlalchemy.exc import IntegrityError, ProgrammingError
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

metadata = MetaData()
receipts = Table(
    "receipts",
    metadata,
    Column("event_id", String(64), primary_key=True),
    Column("body_sha256", String(64), nullable=False),
)
fulfillments = Table(
    "fulfillments",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("event_id", String(64), nullable=False),
    Column("amount_cents", Integer, nullable=False),
)
EFFECTS_QUERY = "SELECT count(*) FROM fulfillments WHERE event_id = :event_id"
EMAIL_S = 0.3

StartResponse = Callable[[str, list[tuple[str, str]]], Any]


def create_app() -> Callable[[dict[str, Any], StartResponse], Iterable[bytes]]:
    db_url = os.environ["ACKLAB_TEST_DB_URL"]
    connect_args = {"timeout": 30} if db_url.startswith("sqlite") else {}
    engine = create_engine(db_url, connect_args=connect_args)
    # Another worker may create the tables at the same moment (PostgreSQL's catalog is not idempotent).
    with contextlib.suppress(IntegrityError, ProgrammingError):
        metadata.create_all(engine)
    verifier = Webhook(os.environ["ACKLAB_TEST_WEBHOOK_SECRET"])

    def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        if environ["REQUEST_METHOD"] != "POST" or environ["PATH_INFO"] != "/hooks":
            start_response("405 Method Not Allowed", [("Content-Length", "0")])
            return [b""]
        body = environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
        headers = {k[5:].replace("_", "-").lower(): v for k, v in environ.items() if k.startswith("HTTP_")}
        try:
            verifier.verify(body, headers)
        except WebhookVerificationError:
            start_response("401 Unauthorized", [("Content-Length", "0")])
            return [b""]
        event_id = headers["webhook-id"]
        digest = hashlib.sha256(body).hexdigest()
        try:
            with engine.begin() as conn:
                conn.execute(receipts.insert().values(event_id=event_id, body_sha256=digest))
                amount = int(json.loads(body)["data"]["amount_cents"])
                conn.execute(fulfillments.insert().values(event_id=event_id, amount_cents=amount))
        except IntegrityError:
            pass  # claimed before: acknowledged, not fulfilled again
        else:
            time.sleep(EMAIL_S)  # the confirmation e-mail, after the commit
        answer = b'{"received": true}'
        start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(answer)))])
        return [answer]

    return app
