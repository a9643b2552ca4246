"""The live handler: receipt-based, so one event has at most one fulfillment.

This is the only file a repair may touch. Interface (see ``app.contract``)::

    def process(session: Session, delivery: Delivery) -> HandlerResult

How it keeps the invariant: the first statement claims the event by inserting its
``Receipt`` with ``ON CONFLICT DO NOTHING``; the database's unique index on
``receipts.event_id`` decides which of several concurrent deliveries wins (PostgreSQL makes
the loser wait for the winner's commit, SQLite serialises writers). Only the winner writes
the fulfillment and stores its response on the receipt, all in the caller's one transaction.
A loser reads the committed receipt: same body -> the stored response again, with
``Idempotent-Replayed: true``; different body -> 409, nothing written.
"""

from __future__ import annotations

import json

from sqlalchemy import insert, select, update
from sqlalchemy.orm import Session

from acklab.app.contract import Delivery, HandlerResult, OrderPaidData, ack
from acklab.app.db import insert_for
from acklab.app.models import Fulfillment, Order, Receipt, utcnow


def process(session: Session, delivery: Delivery) -> HandlerResult:
    """Fulfill an ``order.paid`` event once; acknowledge other types; replay or refuse duplicates."""
    claim = (
        insert_for(session, Receipt)
        .values(
            event_id=delivery.event_id,
            body_sha256=delivery.body_sha256,
            event_type=delivery.event.type,
            status="processing",
            received_at=utcnow(),
        )
        .on_conflict_do_nothing(index_elements=[Receipt.event_id])
        .returning(Receipt.id)
    )
    receipt_id = session.execute(claim).scalar_one_or_none()
    if receipt_id is None:
        return _answer_duplicate(session, delivery)

    if delivery.order is None:
        result = HandlerResult(202, ack(delivery, status="acknowledged"))
    else:
        fulfillment_id = _fulfill(session, delivery.event_id, delivery.order)
        result = HandlerResult(200, ack(delivery, status="fulfilled", fulfillment_id=fulfillment_id))
    session.execute(
        update(Receipt)
        .where(Receipt.id == receipt_id)
        .values(
            status=result.body["status"], response_status=result.status_code, response_body=result.body_json()
        )
    )
    return result


def _fulfill(session: Session, event_id: str, order: OrderPaidData) -> int:
    now = utcnow()
    paid = {
        "status": "paid",
        "amount_cents": order.amount_cents,
        "currency": order.currency,
        "updated_at": now,
    }
    session.execute(
        insert_for(session, Order)
        .values(order_id=order.order_id, **paid)
        .on_conflict_do_update(index_elements=[Order.order_id], set_=paid)
    )
    fulfillment = (
        insert(Fulfillment)
        .values(
            event_id=event_id,
            order_id=order.order_id,
            amount_cents=order.amount_cents,
            currency=order.currency,
            created_at=now,
        )
        .returning(Fulfillment.id)
    )
    return session.execute(fulfillment).scalar_one()


def _answer_duplicate(session: Session, delivery: Delivery) -> HandlerResult:
    receipt = session.execute(select(Receipt).where(Receipt.event_id == delivery.event_id)).scalar_one()
    if receipt.body_sha256 != delivery.body_sha256:
        return _refuse(
            delivery,
            "conflict",
            f"event {delivery.event_id!r} was already received with a different body "
            f"(sha256 {receipt.body_sha256[:12]}…, this one {delivery.body_sha256[:12]}…); an event id "
            "must never be reused for a different payload",
        )
    if receipt.response_status is None or receipt.response_body is None:
        # Unreachable while receipts are only visible once committed with their response;
        # kept so a partial receipt can never be replayed as a success.
        return _refuse(
            delivery, "in_progress", f"event {delivery.event_id!r} is still being processed; retry later"
        )
    return HandlerResult(
        receipt.response_status, json.loads(receipt.response_body), {"Idempotent-Replayed": "true"}
    )


def _refuse(delivery: Delivery, error: str, detail: str) -> HandlerResult:
    return HandlerResult(409, {"error": error, "detail": detail, "event_id": delivery.event_id, "fields": []})
