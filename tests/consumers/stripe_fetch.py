"""A Stripe consumer that trusts nothing in the event but its id: it re-fetches the payment intent (as
pretix and dj-stripe do on every event) with the stripe library, pointed at ``STRIPE_API_BASE``.

``payment_intent.succeeded`` is verified (``stripe.Webhook.construct_event``), the intent retrieved,
and a succeeded intent fulfils its order once (``INSERT OR IGNORE`` on the order). What it does
when the fetch does not give a succeeded intent is the difference between the modes:

* ``drop``: a 404 (``resource_missing``), a 429 or another API error is logged and the event
  acknowledged — so is an intent that is not succeeded yet: the event is lost;
* ``retry-later``: it answers 503, so the provider sends the event again (correct);
* ``refetch-only``: as ``retry-later``, but it never checks ``Stripe-Signature`` — re-fetching is its
  authentication, as pretix's — and it takes ``charge.succeeded`` too: it re-fetches the charge and,
  when it succeeded, fulfils the order of the event's payment intent. A forged event naming one
  order's real charge and another order's payment intent fulfils the other order.

    STRIPE_API_BASE=http://127.0.0.1:12111 STRIPE_API_KEY=sk_test_... SHOP_DB=/tmp/s.sqlite \\
        SHOP_MODE=retry-later uvicorn tests.consumers.stripe_fetch:app --port 9000
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from typing import Any

import anyio.to_thread
import stripe
from fastapi import FastAPI, Request, Response

from tests.consumers.stripe_shop import client, connect

app = FastAPI()
log = logging.getLogger("stripe_fetch")
SCHEMA = "CREATE TABLE IF NOT EXISTS fulfillments (order_id TEXT PRIMARY KEY, event_id TEXT NOT NULL)"


def later(why: str) -> Response:
    if os.environ["SHOP_MODE"] in ("retry-later", "refetch-only"):
        log.warning("answering 503 so Stripe retries: %s", why)
        return Response(status_code=503)
    log.warning("dropping the event: %s", why)
    return Response(status_code=200)


@app.post("/webhooks")
async def receive(request: Request) -> Response:
    payload = await request.body()
    try:
        if os.environ["SHOP_MODE"] == "refetch-only":
            event = stripe.Event.construct_from(json.loads(payload), os.environ["STRIPE_API_KEY"])
        else:
            event = stripe.Webhook.construct_event(
                payload, request.headers.get("stripe-signature"), os.environ["ACKLAB_TEST_STRIPE_SECRET"]
            )
    except (ValueError, stripe.SignatureVerificationError):
        return Response(status_code=400)
    if event.type == "charge.succeeded" and os.environ["SHOP_MODE"] == "refetch-only":
        charge = event.data.object
        return await anyio.to_thread.run_sync(charge_paid, event.id, charge["id"], charge["payment_intent"])
    if event.type != "payment_intent.succeeded":
        return Response(status_code=200)
    # the stripe library blocks: off the event loop, as FastAPI runs a sync endpoint
    return await anyio.to_thread.run_sync(fetch_and_fulfil, event.id, event.data.object["id"])


def fetched(retrieve: Callable[[str], Any], object_id: str) -> tuple[Any, Response | None]:
    """The object as the API has it now, or the answer to give when it could not be fetched."""
    try:
        return retrieve(object_id), None
    except stripe.StripeError as exc:
        return None, later(f"{type(exc).__name__} fetching {object_id}: {exc.http_status} {exc.code}")


def charge_paid(event_id: str, charge_id: str, intent_id: str) -> Response:
    """The charge is re-fetched (is it really paid?), the order found by the event's payment intent."""
    charge, failed = fetched(client(retries=0).v1.charges.retrieve, charge_id)
    if failed is not None:
        return failed
    if charge.status != "succeeded":
        return later(f"{charge_id} is {charge.status}")
    intent, failed = fetched(client(retries=0).v1.payment_intents.retrieve, intent_id)
    if failed is not None:
        return failed
    return fulfil(intent.metadata["order_id"], event_id)


def fulfil(order_id: str, event_id: str) -> Response:
    conn = connect(SCHEMA)
    try:
        conn.execute(
            "INSERT OR IGNORE INTO fulfillments (order_id, event_id) VALUES (?, ?)", (order_id, event_id)
        )
    finally:
        conn.close()
    return Response(status_code=200)


def fetch_and_fulfil(event_id: str, intent_id: str) -> Response:
    intent, failed = fetched(client(retries=0).v1.payment_intents.retrieve, intent_id)
    if failed is not None:
        return failed
    if intent.status != "succeeded":
        return later(f"{intent_id} is {intent.status}, not succeeded")
    return fulfil(intent.metadata["order_id"], event_id)


connect(SCHEMA).close()  # the table exists before the first delivery (the lab reads it from the start)
