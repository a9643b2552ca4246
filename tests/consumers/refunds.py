"""A refund consumer on FastAPI: each payment.succeeded refund is sent to the payment API (httpx).

The API is the lab's outbound sink at ``REFUNDS_URL``, called with ``Authorization: Bearer
$REFUNDS_API_KEY``. A refund row per event (``orders``) is written after the API answered; a
redelivery of a refunded event is acknowledged without a call. A call that fails on the wire
is retried up to three times — with ``REFUNDS_MODE``:

* ``fresh-key``: a new ``Idempotency-Key`` per attempt (uuid4): a dropped call that took effect
  downstream and its retry are two refunds;
* ``event-key``: the event's id as the key: the downstream dedupes the retry (correct).

``REFUNDS_JSON=escaped`` sends the body as an ASCII-safe JSON encoder does (every character
of a string but letters and digits as a ``\\uXXXX`` escape, as PHP's ``JSON_HEX_*`` flags or an
HTML-safe serializer write them): the API reads the same object, the order id never appears
on the wire as written.

    REFUNDS_URL=... REFUNDS_API_KEY=... REFUNDS_DB=/tmp/r.sqlite REFUNDS_MODE=event-key \\
        uvicorn tests.consumers.refunds:app --port 9000
"""

from __future__ import annotations

import json
import os
import sqlite3
import uuid
from typing import Any

import httpx
from fastapi import FastAPI, Request, Response
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

app = FastAPI()
SCHEMA = "CREATE TABLE IF NOT EXISTS orders (event_id TEXT PRIMARY KEY, refund_id TEXT NOT NULL)"


def connect() -> sqlite3.Connection:
    conn = sqlite3.connect(os.environ["REFUNDS_DB"], timeout=30, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(SCHEMA)
    return conn


def escaped(value: Any) -> str:
    """`value` as JSON with every string character but letters and digits ``\\u``-escaped."""
    if isinstance(value, str):
        return '"' + "".join(c if c.isascii() and c.isalnum() else f"\\u{ord(c):04x}" for c in value) + '"'
    if isinstance(value, dict):
        return "{" + ",".join(f"{escaped(k)}:{escaped(v)}" for k, v in value.items()) + "}"
    return json.dumps(value)


def body(order_id: str) -> bytes:
    document = {"order_id": order_id, "amount": 1200}
    if os.environ.get("REFUNDS_JSON") == "escaped":
        return escaped(document).encode("ascii")
    return json.dumps(document).encode()


async def refund(client: httpx.AsyncClient, event_id: str, order_id: str) -> str:
    last: Exception | None = None
    for _ in range(3):
        key = event_id if os.environ["REFUNDS_MODE"] == "event-key" else str(uuid.uuid4())
        try:
            answer = await client.post(
                "/v1/refunds",
                content=body(order_id),
                headers={"Idempotency-Key": key, "Content-Type": "application/json"},
            )
            answer.raise_for_status()
            return str(answer.json()["id"])
        except httpx.TransportError as exc:
            last = exc
    raise RuntimeError(f"the payment API failed three times: {last}")


@app.post("/webhooks")
async def webhook(request: Request) -> Response:
    payload = await request.body()
    try:
        event = Webhook(os.environ["ACKLAB_TEST_WEBHOOK_SECRET"]).verify(payload, dict(request.headers))
    except WebhookVerificationError:
        return Response(status_code=400)
    event_id, order_id = str(event["id"]), str(event["data"]["order_id"])
    conn = connect()
    try:
        if conn.execute("SELECT 1 FROM orders WHERE event_id = ?", (event_id,)).fetchone() is not None:
            return Response(status_code=200)
        headers = {"Authorization": f"Bearer {os.environ['REFUNDS_API_KEY']}"}
        async with httpx.AsyncClient(
            base_url=os.environ["REFUNDS_URL"], headers=headers, timeout=5
        ) as client:
            refund_id = await refund(client, event_id, order_id)
        conn.execute(
            "INSERT OR IGNORE INTO orders (event_id, refund_id) VALUES (?, ?)", (event_id, refund_id)
        )
    finally:
        conn.close()
    return Response(status_code=200)


connect().close()  # the table exists before the first delivery (the lab reads it from the start)
