"""A shop's checkout (FastAPI under uvicorn): the Stripe webhook and the customer's browser both fulfil.

Stripe's "fulfil orders" guide: the ``checkout.session.completed`` webhook *and* the success
page the customer's browser is sent back to (``/checkout/success?session_id=...``) each call
one ``fulfill_checkout(session_id)``, which "must be safe to run multiple times, potentially
concurrently". It retrieves the session first (the work between its check and its insert;
``CHECKOUT_WORK_MS``, default 2). ``CHECKOUT_MODE``:

* ``racy``: looks for an order of the session, and creates one when there is none —
  check-then-insert: a webhook and a browser return at the same moment both find none and
  both create it (Medusa #13301, Saleor #12647, WooCommerce Stripe #889, pretix #1166);
* ``locked``: the order's ``checkout_session`` is unique and the insert claims it
  (``ON CONFLICT DO NOTHING``): one order, whoever comes first.

``CHECKOUT_MAIL`` (with ``SMTP_PORT``): the order confirmation, sent with `smtplib` —

* ``created``: by the call that created the order, after its commit (one email per order);
* ``always``: by every call, after ``fulfill_checkout`` returned — the webhook *and* the
  browser's return each mail the customer, however many orders the database kept.

Tables come from ``python -m tests.consumers.checkout migrate`` (``setup:``)::

    CHECKOUT_DB_URL=sqlite:////tmp/x/shop.db CHECKOUT_MODE=locked python -m tests.consumers.checkout migrate
    CHECKOUT_DB_URL=... CHECKOUT_MODE=locked python -m uvicorn --factory tests.consumers.checkout:create_app
"""

from __future__ import annotations

import os
import smtplib
import sys
import time
from email.message import EmailMessage
from typing import Any

import stripe
from fastapi import FastAPI, Request, Response
from fastapi.responses import HTMLResponse
from sqlalchemy import Column, Integer, MetaData, String, Table, create_engine, insert, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Engine
from starlette.concurrency import run_in_threadpool

MODES = ("racy", "locked")
MAILS = ("", "created", "always")
COUNT_QUERY = "SELECT count(*) FROM orders WHERE checkout_session = :object_id"


def tables(mode: str) -> tuple[MetaData, Table]:
    metadata = MetaData()
    orders = Table(
        "orders",
        metadata,
        Column("id", Integer, primary_key=True, autoincrement=True),
        Column("checkout_session", String(64), nullable=False, unique=mode == "locked"),
        Column("amount_total", Integer, nullable=False),
        Column("source", String(16), nullable=False),
    )
    return metadata, orders


def _mode() -> str:
    mode = os.environ.get("CHECKOUT_MODE", "locked")
    if mode not in MODES:
        raise SystemExit(f"checkout: CHECKOUT_MODE={mode!r}; expected one of {', '.join(MODES)}")
    return mode


def _engine() -> Engine:
    url = os.environ["CHECKOUT_DB_URL"]
    return create_engine(url, connect_args={"timeout": 30} if url.startswith("sqlite") else {}, pool_size=20)


def migrate() -> None:
    metadata, _ = tables(_mode())
    metadata.create_all(_engine())


def create_app() -> FastAPI:
    mode = _mode()
    engine = _engine()
    _, orders = tables(mode)
    work_s = float(os.environ.get("CHECKOUT_WORK_MS", "2")) / 1000
    secret = os.environ["ACKLAB_TEST_STRIPE_SECRET"]
    app = FastAPI()

    def fulfill_checkout(session_id: str, amount_total: int, source: str) -> bool:
        """Create the session's order unless it exists; True when this call created it."""
        values = {"checkout_session": session_id, "amount_total": amount_total, "source": source}
        if mode == "racy":
            with engine.connect() as conn:
                known = conn.execute(
                    select(orders.c.id).where(orders.c.checkout_session == session_id)
                ).first()
            if known is not None:
                return False
            time.sleep(work_s)  # stripe.checkout.Session.retrieve(session_id, expand=["line_items"])
            with engine.begin() as conn:
                conn.execute(insert(orders).values(**values))
            return True
        time.sleep(work_s)
        dialect = postgresql if engine.dialect.name == "postgresql" else sqlite
        with engine.begin() as conn:
            created = conn.execute(
                dialect.insert(orders)
                .values(**values)
                .on_conflict_do_nothing(index_elements=["checkout_session"])
            )
        return bool(created.rowcount)

    mail = os.environ.get("CHECKOUT_MAIL", "")
    if mail not in MAILS:
        raise SystemExit(f"checkout: CHECKOUT_MAIL={mail!r}; expected created, always or nothing")

    def fulfil_and_confirm(session_id: str, amount_total: int, source: str) -> bool:
        created = fulfill_checkout(session_id, amount_total, source)
        if mail == "always" or (mail == "created" and created):
            message = EmailMessage()
            message["From"], message["To"] = "shop@example.test", "customer@example.test"
            message["Subject"] = f"Your order for checkout {session_id} is confirmed"
            message.set_content(f"Thank you for your order ({session_id}, {source}).")
            with smtplib.SMTP("127.0.0.1", int(os.environ["SMTP_PORT"]), timeout=10) as smtp:
                smtp.send_message(message)
        return created

    @app.post("/stripe/webhooks")
    async def webhook(request: Request) -> Response:
        payload = await request.body()
        try:
            event: Any = stripe.Webhook.construct_event(
                payload, request.headers.get("stripe-signature"), secret
            )
        except (ValueError, stripe.SignatureVerificationError):
            return Response(status_code=400)
        if event["type"] == "checkout.session.completed":
            session = event["data"]["object"]
            if session["payment_status"] == "paid":
                await run_in_threadpool(
                    fulfil_and_confirm, session["id"], int(session["amount_total"]), "webhook"
                )
        return Response(status_code=200)

    @app.get("/checkout/success", response_class=HTMLResponse)
    async def success(session_id: str) -> str:
        created = await run_in_threadpool(fulfil_and_confirm, session_id, 0, "browser")
        return f"<p>Thank you for your order{' (created now)' if created else ''}.</p>"

    @app.get("/health")
    def health() -> dict[str, str]:
        return {"status": "ok", "mode": mode}

    return app


if __name__ == "__main__" and sys.argv[1:] == ["migrate"]:
    migrate()
