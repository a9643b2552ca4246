"""A shop whose schema comes from a migration step, served by gunicorn with several workers.

It never creates its tables itself: ``python -m tests.consumers.migrated_shop migrate`` does,
as `alembic upgrade head` or `manage.py migrate` would, and a target spec runs it as
``setup:`` before the lab serves the shop. Everything it needs comes from the environment,
so one spec serves it on a fresh ``{{port}}``, with its database in a fresh ``{{scratch}}``
directory or a fresh ``{{database_url}}`` each run:

    SHOP_DB_URL=sqlite:////tmp/x/shop.db python -m tests.consumers.migrated_shop migrate
    SHOP_DB_URL=... ACKLAB_TEST_WEBHOOK_SECRET=whsec_... \\
        python -m gunicorn --workers 2 --bind 127.0.0.1:9000 'tests.consumers.migrated_shop:create_app()'

``SHOP_DEDUPE=claim`` (default) claims the event id in the fulfilment's transaction;
``SHOP_DEDUPE=none`` fulfils every delivery (the bug a retry turns into a double shipment).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Callable, Iterable
from typing import Any

from sqlalchemy import Column, Integer, MetaData, String, Table, create_engine, inspect
from sqlalchemy.exc import IntegrityError
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

metadata = MetaData()
claims = Table("claims", metadata, Column("event_id", String(64), primary_key=True))
shipments = Table(
    "shipments",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("event_id", String(64), nullable=False),
    Column("order_id", String(64), nullable=False),
    Column("digest", String(64), nullable=False),
)
EFFECTS_QUERY = "SELECT count(*) FROM shipments WHERE event_id = :event_id"

StartResponse = Callable[[str, list[tuple[str, str]]], Any]


def _engine() -> Any:
    url = os.environ["SHOP_DB_URL"]
    return create_engine(url, connect_args={"timeout": 30} if url.startswith("sqlite") else {})


def migrate() -> None:
    metadata.create_all(_engine())


def create_app() -> Callable[[dict[str, Any], StartResponse], Iterable[bytes]]:
    engine = _engine()
    missing = {t.name for t in metadata.sorted_tables} - set(inspect(engine).get_table_names())
    if missing:
        raise SystemExit(f"migrated_shop: tables {sorted(missing)} are missing; run the migrate step first")
    verifier = Webhook(os.environ["ACKLAB_TEST_WEBHOOK_SECRET"])
    claim = os.environ.get("SHOP_DEDUPE", "claim") == "claim"

    def answer(start_response: StartResponse, status: str, doc: object) -> list[bytes]:
        body = json.dumps(doc).encode()
        start_response(status, [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
        return [body]

    def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        if environ["PATH_INFO"] == "/health":
            return answer(start_response, "200 OK", {"ok": True})
        if environ["REQUEST_METHOD"] != "POST" or environ["PATH_INFO"] != "/hooks":
            return answer(start_response, "404 Not Found", {"error": "no such route"})
        body = environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
        headers = {k[5:].replace("_", "-").lower(): v for k, v in environ.items() if k.startswith("HTTP_")}
        try:
            verifier.verify(body, headers)
        except WebhookVerificationError:
            return answer(start_response, "401 Unauthorized", {"error": "bad signature"})
        event_id = headers["webhook-id"]
        order_id = str(json.loads(body)["data"]["order_id"])
        try:
            with engine.begin() as conn:
                if claim:
                    conn.execute(claims.insert().values(event_id=event_id))
                conn.execute(
                    shipments.insert().values(
                        event_id=event_id, order_id=order_id, digest=hashlib.sha256(body).hexdigest()
                    )
                )
        except IntegrityError:
            return answer(start_response, "200 OK", {"duplicate": True})
        return answer(start_response, "200 OK", {"shipped": True})

    return app


if __name__ == "__main__":
    if sys.argv[1:] != ["migrate"]:
        raise SystemExit("usage: python -m tests.consumers.migrated_shop migrate")
    migrate()
