"""A Stripe invoice consumer (FastAPI under uvicorn) that provisions a paid invoice's service.

Stripe sends ``invoice.paid`` and ``invoice.payment_succeeded`` for one payment, each with its
own event id. The consumer dedupes deliveries by event id (a retry changes nothing); what it
does with the two siblings is the bug or not (``INVOICES_MODE``):

* ``both``: provisions on either event — every event id is new, so the dedupe cannot see
  that the second is the same payment: two provisions for one invoice;
* ``correct``: provisions once per invoice, claimed by a unique index on ``invoice_id`` in the
  transaction that records the event.

``INVOICES_MAIL`` (with ``SMTP_PORT``): a receipt, sent with `smtplib` after the commit —

* ``provisioned``: by the event that provisioned the invoice (one receipt per payment);
* ``each``: by every new paid event — one per sibling, two receipts for one payment (the pay
  gem's #612), however the provisions are deduped.

Tables come from ``python -m tests.consumers.invoices migrate`` (``setup:``), with
``INVOICES_MODE`` deciding whether ``provisions.invoice_id`` is unique (the fix is a migration)::

    INVOICES_DB_URL=sqlite:////tmp/x/inv.db INVOICES_MODE=correct python -m tests.consumers.invoices migrate
    INVOICES_DB_URL=... INVOICES_MODE=correct python -m uvicorn --factory tests.consumers.invoices:create_app
"""

from __future__ import annotations

import os
import smtplib
import sys
from email.message import EmailMessage
from typing import Any

import stripe
from fastapi import FastAPI, Request, Response
from sqlalchemy import Column, Integer, MetaData, String, Table, create_engine, insert
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import IntegrityError
from starlette.concurrency import run_in_threadpool

MODES = ("both", "correct")
MAILS = ("", "provisioned", "each")
PAID = frozenset({"invoice.paid", "invoice.payment_succeeded"})
COUNT_QUERY = "SELECT count(*) FROM provisions WHERE invoice_id = :object_id"


def tables(mode: str) -> tuple[MetaData, Table, Table]:
    metadata = MetaData()
    processed = Table("processed_events", metadata, Column("event_id", String(64), primary_key=True))
    provisions = Table(
        "provisions",
        metadata,
        Column("id", Integer, primary_key=True, autoincrement=True),
        Column("invoice_id", String(64), nullable=False, unique=mode == "correct"),
        Column("event_id", String(64), nullable=False),
        Column("customer", String(64), nullable=False),
    )
    return metadata, processed, provisions


def _engine() -> Engine:
    url = os.environ["INVOICES_DB_URL"]
    return create_engine(url, connect_args={"timeout": 30} if url.startswith("sqlite") else {}, pool_size=20)


def _mode() -> str:
    mode = os.environ.get("INVOICES_MODE", "correct")
    if mode not in MODES:
        raise SystemExit(f"invoices: INVOICES_MODE={mode!r}; expected one of {', '.join(MODES)}")
    return mode


def migrate() -> None:
    metadata, _, _ = tables(_mode())
    metadata.create_all(_engine())


def provision(conn: Connection, provisions: Table, mode: str, event: Any) -> bool:
    invoice = event["data"]["object"]
    values = {"invoice_id": invoice["id"], "event_id": event["id"], "customer": invoice["customer"]}
    if mode == "both":
        conn.execute(insert(provisions).values(**values))
        return True
    dialect = postgresql if conn.dialect.name == "postgresql" else sqlite
    claimed = conn.execute(
        dialect.insert(provisions).values(**values).on_conflict_do_nothing(index_elements=["invoice_id"])
    )
    return bool(claimed.rowcount)


def create_app() -> FastAPI:
    mode = _mode()
    engine = _engine()
    _, processed, provisions = tables(mode)
    secret = os.environ["ACKLAB_TEST_STRIPE_SECRET"]
    app = FastAPI()

    mail = os.environ.get("INVOICES_MAIL", "")
    if mail not in MAILS:
        raise SystemExit(f"invoices: INVOICES_MAIL={mail!r}; expected provisioned, each or nothing")

    def receipt(event: Any) -> None:
        invoice = event["data"]["object"]
        message = EmailMessage()
        message["From"], message["To"] = "billing@example.test", "customer@example.test"
        message["Subject"] = f"Receipt for invoice {invoice['id']}"
        message.set_content(f"We received your payment of {invoice['amount_paid']} {invoice['currency']}.")
        with smtplib.SMTP("127.0.0.1", int(os.environ["SMTP_PORT"]), timeout=10) as smtp:
            smtp.send_message(message)

    def handle(event: Any) -> dict[str, Any]:
        try:
            with engine.begin() as conn:
                conn.execute(insert(processed).values(event_id=event["id"]))
                provisioned = provision(conn, provisions, mode, event) if event["type"] in PAID else False
        except IntegrityError:
            return {"received": True, "duplicate": True}
        if (mail == "each" and event["type"] in PAID) or (mail == "provisioned" and provisioned):
            receipt(event)
        return {"received": True, "provisioned": provisioned}

    @app.post("/stripe/webhooks")
    async def webhook(request: Request) -> Response:
        payload = await request.body()
        try:
            event = stripe.Webhook.construct_event(payload, request.headers.get("stripe-signature"), secret)
        except (ValueError, stripe.SignatureVerificationError):
            return Response(status_code=400)
        answer = await run_in_threadpool(handle, event)
        return Response(content=str(answer).encode(), media_type="text/plain")

    @app.get("/health")
    def health() -> dict[str, str]:
        return {"status": "ok", "mode": mode}

    return app


if __name__ == "__main__" and sys.argv[1:] == ["migrate"]:
    migrate()
