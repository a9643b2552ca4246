"""Handler semantics through the app, on SQLite and on PostgreSQL (in-process ASGI)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from acklab.app.db import create_db_engine
from tests.app.conftest import (
    OTHER_SECRET,
    AppClient,
    MakeClient,
    drawn,
    new_event_id,
    order_event,
    standard_headers,
)


def test_a_delivery_fulfills_once(client: AppClient) -> None:
    event_id = new_event_id()
    body = order_event(event_id, order_id="ord_1")

    response = client.deliver(body, standard_headers(event_id, body))

    assert response.status_code == 200, response.text
    assert response.json() == {
        "event_id": event_id,
        "status": "fulfilled",
        "order_id": "ord_1",
        "fulfillment_id": 1,
    }
    assert "idempotent-replayed" not in response.headers
    assert client.effects(event_id) == 1
    order = client.get("/orders/ord_1").json()
    sent = drawn(event_id)
    assert (order["status"], order["amount_cents"], order["currency"]) == (
        "paid",
        sent["amount_cents"],
        sent["currency"],
    )
    assert [f["event_id"] for f in order["fulfillments"]] == [event_id]


def test_an_identical_retry_replays_the_stored_response(client: AppClient) -> None:
    event_id = new_event_id()
    body = order_event(event_id)
    first = client.deliver(body, standard_headers(event_id, body))
    rows = client.rows()

    # A retry is re-signed with a new timestamp: the dedupe key is the event id, not the signature.
    retry = client.deliver(body, standard_headers(event_id, body, skew_s=-5))

    assert retry.status_code == first.status_code == 200
    assert retry.content == first.content
    assert retry.headers["idempotent-replayed"] == "true"
    assert client.effects(event_id) == 1
    assert client.rows() == rows


def test_a_conflicting_body_is_refused_and_changes_nothing(client: AppClient) -> None:
    event_id = new_event_id()
    body = order_event(event_id, order_id="ord_c")
    client.deliver(body, standard_headers(event_id, body))
    rows = client.rows()
    conflicting = order_event(event_id, order_id="ord_c", amount_cents=9900)

    response = client.deliver(conflicting, standard_headers(event_id, conflicting))

    assert response.status_code == 409
    assert response.json()["error"] == "conflict"
    assert response.json()["event_id"] == event_id
    assert event_id in response.json()["detail"]
    assert client.effects(event_id) == 1
    assert client.rows() == rows
    assert client.get("/orders/ord_c").json()["amount_cents"] == drawn(event_id)["amount_cents"]


def test_an_unknown_event_type_is_acknowledged_and_recorded_without_fulfillment(client: AppClient) -> None:
    event_id = new_event_id()
    body = json.dumps(
        {
            "id": event_id,
            "type": "order.refunded",
            "timestamp": "2024-05-01T10:00:00Z",
            "data": {"anything": ["goes"]},
        }
    ).encode()
    rows = client.rows()

    response = client.deliver(body, standard_headers(event_id, body))
    retry = client.deliver(body, standard_headers(event_id, body))

    assert response.status_code == 202
    assert response.json()["status"] == "acknowledged"
    assert (retry.status_code, retry.headers["idempotent-replayed"]) == (202, "true")
    assert client.effects(event_id) == 0
    assert client.rows() == {**rows, "receipts": rows["receipts"] + 1}


@pytest.mark.parametrize(
    ("case", "reason"),
    [
        ("forged", "invalid_signature"),
        ("stale", "stale_timestamp"),
        ("future", "future_timestamp"),
        ("tampered", "invalid_signature"),
        ("unsigned", "missing_signature"),
        ("garbled", "malformed_signature"),
    ],
)
@pytest.mark.parametrize("handler", ["live", "unsafe"])
def test_a_bad_signature_is_refused_and_changes_nothing(
    make_client: MakeClient, handler: str, case: str, reason: str
) -> None:
    client = make_client(handler=handler)
    event_id = new_event_id()
    body = order_event(event_id)
    headers = {
        "forged": standard_headers(event_id, body, secret=OTHER_SECRET),
        "stale": standard_headers(event_id, body, skew_s=-900),
        "future": standard_headers(event_id, body, skew_s=900),
        "tampered": standard_headers(event_id, body),
        "unsigned": {"content-type": "application/json"},
        "garbled": {**standard_headers(event_id, body), "webhook-signature": "v1,not*base64"},
    }[case]
    if case == "tampered":
        body += b" "  # still the same JSON, other bytes than were signed
    rows = client.rows()

    response = client.deliver(body, headers)

    assert response.status_code == 401
    assert response.json()["error"] == reason
    assert response.json()["detail"]
    assert client.effects(event_id) == 0
    assert client.rows() == rows


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (b'{"id": "evt_x", "type": "order.paid", "data": {', "body"),
        (b"\xff\xfe not utf-8", "body"),
        (b"[1, 2]", "body"),
        (
            order_event("evt_m", drop=("amount_cents",)),
            "data.amount_cents",
        ),
        (order_event("evt_s", amount_cents="1200"), "data.amount_cents"),
        (order_event("evt_f", amount_cents=12.5), "data.amount_cents"),
        (order_event("evt_o", amount_cents=True), "data.amount_cents"),
        (order_event("evt_n", amount_cents=-1), "data.amount_cents"),
        (order_event("evt_c", currency="euro"), "data.currency"),
        (order_event("evt_z", order_id="ord\u0000nul"), "data.order_id"),
        (order_event("evt_t", timestamp="yesterday"), "timestamp"),
        (order_event("evt_b", amount_cents=2**63), "data.amount_cents"),
    ],
    ids=[
        "truncated",
        "not-utf8",
        "not-an-object",
        "missing-amount",
        "amount-as-string",
        "float-amount",
        "bool-amount",
        "negative-amount",
        "bad-currency",
        "nul-in-order-id",
        "bad-timestamp",
        "huge-amount",
    ],
)
def test_a_malformed_event_is_refused_naming_the_field(client: AppClient, body: bytes, field: str) -> None:
    event_id = new_event_id()
    rows = client.rows()

    response = client.deliver(body, standard_headers(event_id, body))

    assert response.status_code == 422, response.text
    assert field in [f["field"] for f in response.json()["fields"]]
    assert field.rpartition(".")[2] in response.json()["detail"] or field == "body"
    assert client.rows() == rows


def test_a_missing_amount_is_named_in_the_answer(client: AppClient) -> None:
    event_id = new_event_id()
    body = json.dumps({"id": event_id, "type": "order.paid", "data": {"order_id": "x"}}).encode()

    response = client.deliver(body, standard_headers(event_id, body))

    assert response.status_code == 422
    assert "amount_cents" in response.text


def test_an_oversize_body_is_refused_whether_declared_or_streamed(make_client: MakeClient) -> None:
    client = make_client(max_body_bytes=1024)
    event_id = new_event_id()
    body = order_event(event_id, padding="x" * 2000)
    headers = standard_headers(event_id, body)
    rows = client.rows()

    declared = client.deliver(body, headers)

    async def chunks():  # no Content-Length: the limit must hold on what actually arrives
        for start in range(0, len(body), 256):
            yield body[start : start + 256]

    streamed = client.post("/webhooks/orders", content=chunks(), headers=headers)

    assert declared.status_code == streamed.status_code == 413
    assert "1024" in declared.json()["detail"]
    assert client.rows() == rows
    # the limit is on the body only: the same event under the limit is fine
    small = order_event(event_id)
    assert client.deliver(small, standard_headers(event_id, small)).status_code == 200


def test_the_unsafe_handler_fulfills_every_delivery(make_client: MakeClient) -> None:
    client = make_client(handler="unsafe")
    event_id = new_event_id()
    body = order_event(event_id)

    first = client.deliver(body, standard_headers(event_id, body))
    retry = client.deliver(body, standard_headers(event_id, body))
    conflicting = order_event(event_id, amount_cents=9900)
    third = client.deliver(conflicting, standard_headers(event_id, conflicting))

    assert (first.status_code, retry.status_code, third.status_code) == (200, 200, 200)
    assert "idempotent-replayed" not in retry.headers
    assert client.effects(event_id) == 3


def test_health_orders_and_effects_probe(client: AppClient, database_url: str) -> None:
    health = client.get("/health")
    assert health.json() == {
        "status": "ok",
        "handler": "live",
        "scheme": "standard",
        "database": database_url.split(":", maxsplit=1)[0].split("+", maxsplit=1)[0],
    }
    missing = client.get("/orders/ord_nope")
    assert missing.status_code == 404
    assert missing.json()["error"] == "not_found"
    assert client.get("/events/evt_never_seen/effects").json() == {"event_id": "evt_never_seen", "count": 0}


def test_an_unreachable_database_is_answered_503_without_details(client: AppClient) -> None:
    # Swap the engine for one whose server refuses connections (port 1 on loopback).
    fixture = client.app.state.fixture
    unreachable = create_db_engine("postgresql+psycopg://acklab:hunter2@127.0.0.1:1/gone")
    client.app.state.fixture = dataclasses.replace(fixture, engine=unreachable)
    try:
        event_id = new_event_id()
        body = order_event(event_id)
        answers = [client.get("/health"), client.deliver(body, standard_headers(event_id, body))]
    finally:
        client.app.state.fixture = fixture
        unreachable.dispose()

    for answer in answers:
        assert answer.status_code == 503
        assert answer.json()["error"] == "database_unavailable"
        assert answer.headers["retry-after"] == "1"
        assert "hunter2" not in answer.text


def test_every_answer_says_when_the_delivery_entered_the_handler(client: AppClient) -> None:
    import time

    from acklab.app.routes import ENTERED_HEADER
    from acklab.harness.wire.transports import ENTERED_HEADER as LAB_READS
    from acklab.harness.wire.transports import RECEIVED_HEADER as RECEIVED
    from acklab.harness.wire.transports import entered_ns
    from tests.harness.handlers import ENTERED_HEADER as RACY_HANDLER_SENDS

    assert ENTERED_HEADER.lower() == LAB_READS == RACY_HANDLER_SENDS.lower()  # one name, three places
    event_id = new_event_id()
    body = order_event(event_id)
    before = time.monotonic_ns()
    first = client.deliver(body, standard_headers(event_id, body))
    replay = client.deliver(body, standard_headers(event_id, body))
    after = time.monotonic_ns()
    entered = [entered_ns(first.headers), entered_ns(replay.headers)]
    # CLOCK_MONOTONIC, read inside the handler's worker thread: between the lab's own readings.
    assert all(n is not None and before <= n <= after for n in entered), entered
    assert entered[0] < entered[1]  # type: ignore[operator]
    assert replay.headers["idempotent-replayed"] == "true"
    # The server's side: it had the whole request before the handler's thread took it.
    received = [entered_ns(a.headers, RECEIVED) for a in (first, replay)]
    assert all(
        r is not None and e is not None and before <= r <= e for r, e in zip(received, entered, strict=True)
    ), received
