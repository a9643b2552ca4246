"""A shop that refunds what it cannot fulfil, with the stripe library, and records the refunds Stripe tells it of.

``checkout.session.completed`` for a sold-out order: the shop refunds the session's payment
intent (``POST /v1/refunds``, keyed by the event) and records the refund. ``charge.refunded``
(a refund made in the Dashboard, or the echo of its own): the shop records the refund too. Stripe
sends ``charge.refunded`` for the shop's own refund at once — while the shop's refund call is
still open. How each path records is the difference between the modes:

* ``check-then-insert``: the webhook records a refund when the order has none yet, and the
  refund call records its refund when it returns: the echo finds none (the call has not returned)
  and records it, then the call records it again — one refund, two rows (antiwork/gumroad #6193);
* ``by-refund-id``: both record under the refund's id (``INSERT OR IGNORE``); the webhook lists the
  charge's refunds (``GET /v1/refunds?charge=``): one row however they interleave (correct).

    STRIPE_API_BASE=... STRIPE_API_KEY=sk_test_... SHOP_DB=/tmp/r.sqlite SHOP_MODE=by-refund-id \\
        uvicorn tests.consumers.stripe_refunds:app --port 9000
"""

from __future__ import annotations

import os
from typing import Any

import anyio.to_thread
import stripe
from fastapi import FastAPI, Request, Response

from tests.consumers.stripe_shop import client, connect

app = FastAPI()
SCHEMA = "CREATE TABLE IF NOT EXISTS refunds (refund_id TEXT UNIQUE, order_id TEXT NOT NULL, amount INTEGER NOT NULL)"


def record(refund_id: str | None, order_id: str, amount: int) -> None:
    conn = connect(SCHEMA)
    try:
        if os.environ["SHOP_MODE"] == "by-refund-id":
            conn.execute("INSERT OR IGNORE INTO refunds VALUES (?, ?, ?)", (refund_id, order_id, amount))
        elif (
            refund_id is not None
            or conn.execute("SELECT 1 FROM refunds WHERE order_id = ?", (order_id,)).fetchone() is None
        ):
            conn.execute("INSERT INTO refunds VALUES (?, ?, ?)", (refund_id, order_id, amount))
    finally:
        conn.close()


def refund_sold_out(event_id: str, session: Any) -> None:
    """The order cannot be fulfilled: refund it, then record the refund."""
    order_id = session["metadata"]["order_id"]
    refund = client().v1.refunds.create(
        params={"payment_intent": session["payment_intent"], "metadata": {"order_id": order_id}},
        options={"idempotency_key": f"sold-out-{event_id}"},
    )
    record(refund.id, order_id, refund.amount)


def refunded(charge: Any) -> None:
    """Stripe says the charge was refunded: record what it says."""
    order_id = charge["metadata"]["order_id"]
    if os.environ["SHOP_MODE"] == "by-refund-id":
        for refund in client().v1.refunds.list(params={"charge": charge["id"]}).data:
            record(refund.id, order_id, refund.amount)
    else:
        record(None, order_id, charge["amount_refunded"])


@app.post("/webhooks")
async def receive(request: Request) -> Response:
    payload = await request.body()
    try:
        event = stripe.Webhook.construct_event(
            payload, request.headers.get("stripe-signature"), os.environ["ACKLAB_TEST_STRIPE_SECRET"]
        )
    except (ValueError, stripe.SignatureVerificationError):
        return Response(status_code=400)
    obj = event.data.object
    # the stripe library blocks: off the event loop (one thread per request, as FastAPI's sync endpoints)
    if event.type == "checkout.session.completed":
        await anyio.to_thread.run_sync(refund_sold_out, event.id, obj)
    elif event.type == "charge.refunded":
        await anyio.to_thread.run_sync(refunded, obj)
    return Response(status_code=200)


connect(SCHEMA).close()  # the table exists before the first delivery (the lab reads it from the start)
