"""The live handler: receipt-based, so one event has at most one fulfillment — and one order too.

This is the only file a repair may touch. Interface (see ``app.contract``)::

    def process(session: Session, delivery: Delivery) -> HandlerResult
    def complete_checkout(session: Session, checkout: CheckoutReturn) -> HandlerResult

How it keeps the invariants:

* One event, one effect: the first statement claims the event by inserting its ``Receipt``
  with ``ON CONFLICT DO NOTHING``; the database's unique index on ``receipts.event_id``
  decides which of several concurrent deliveries wins (PostgreSQL makes the loser wait for
  the winner's commit, SQLite serialises writers). A loser reads the committed receipt: same
  body -> the stored response again, with ``Idempotent-Replayed: true``; different body ->
  409, nothing written.
* The newest state wins: an order's lifecycle (``order.created`` -> ``order.paid`` ->
  ``order.refunded``) moves its status only with an event newer than the order's watermark
  (the creation time of the newest event applied), compared strictly and in one statement:
  a late or redelivered older event — even one of the same second — changes nothing.
* One order, one fulfillment: ``order.paid``, its sibling ``payment.succeeded`` and the
  customer's browser returning from checkout each fulfil only after claiming the order
  (``FulfillmentClaim``, keyed by order id) in the same transaction as the fulfillment.
* One confirmation: a fulfilling event's email and warehouse request (``app.notify``) go out
  after the commit, the request keyed by the event's id.

Everything happens in the caller's one transaction.
"""

from __future__ import annotations

import json
from datetime import datetime

from sqlalchemy import insert, or_, select, update
from sqlalchemy.orm import Session

from acklab.app.contract import (
    CHECKOUT_RETURN,
    FULFILLING,
    ORDER_STATUS,
    CheckoutReturn,
    Delivery,
    HandlerResult,
    OrderEventData,
    ack,
)
from acklab.app.db import insert_for
from acklab.app.models import Fulfillment, FulfillmentClaim, Order, Receipt, utcnow
from acklab.app.notify import after_commit, confirm_fulfillment


def process(session: Session, delivery: Delivery) -> HandlerResult:
    """Apply an order event once, if it is the newest; fulfil an order once; replay or refuse duplicates."""
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

    order = delivery.lifecycle()
    if order is None:
        result = HandlerResult(202, ack(delivery, status="acknowledged"))
    elif not _apply(session, order, ORDER_STATUS[delivery.event.type], delivery.event.timestamp):
        result = HandlerResult(200, ack(delivery, status="stale"))
    elif delivery.event.type in FULFILLING and _claim(session, order.order_id, delivery.event_id):
        fulfillment_id = _fulfill(
            session, delivery.event_id, order.order_id, order.amount_cents, order.currency
        )
        # Told once committed, with the event's id as the warehouse's idempotency key.
        after_commit(session, confirm_fulfillment, order.order_id, idempotency_key=delivery.event_id)
        result = HandlerResult(200, ack(delivery, status="fulfilled", fulfillment_id=fulfillment_id))
    else:
        result = HandlerResult(200, ack(delivery, status="applied"))
    session.execute(
        update(Receipt)
        .where(Receipt.id == receipt_id)
        .values(
            status=result.body["status"], response_status=result.status_code, response_body=result.body_json()
        )
    )
    return result


def complete_checkout(session: Session, checkout: CheckoutReturn) -> HandlerResult:
    """The customer's browser is back from paying: fulfil the order unless the webhook already did."""
    session.execute(
        insert_for(session, Order)
        .values(
            order_id=checkout.order_id,
            status="paid",
            amount_cents=checkout.amount_cents,
            currency=checkout.currency,
            updated_at=utcnow(),
        )
        .on_conflict_do_nothing(index_elements=[Order.order_id])
    )
    body: dict[str, object] = {"order_id": checkout.order_id, "status": "completed", "fulfillment_id": None}
    if _claim(session, checkout.order_id, CHECKOUT_RETURN):
        fulfillment_id = _fulfill(
            session, CHECKOUT_RETURN, checkout.order_id, checkout.amount_cents, checkout.currency
        )
        body.update(status="fulfilled", fulfillment_id=fulfillment_id)
    return HandlerResult(200, body)


def _apply(session: Session, order: OrderEventData, status: str, at: datetime) -> bool:
    """Move the order to `status` if `at` is newer than its watermark (strictly); False: a stale event."""
    values = {
        "status": status,
        "amount_cents": order.amount_cents,
        "currency": order.currency,
        "updated_at": utcnow(),
        "event_at": at,
    }
    created = session.execute(
        insert_for(session, Order)
        .values(order_id=order.order_id, **values)
        .on_conflict_do_nothing(index_elements=[Order.order_id])
        .returning(Order.order_id)
    ).scalar_one_or_none()
    if created is not None:
        return True
    moved = session.execute(
        update(Order)
        .where(Order.order_id == order.order_id, or_(Order.event_at.is_(None), Order.event_at < at))
        .values(**values)
        .returning(Order.order_id)
    ).scalar_one_or_none()
    return moved is not None


def _claim(session: Session, order_id: str, by: str) -> bool:
    """Claim the order's one fulfillment for `by` (an event id, or the browser return)."""
    claimed = session.execute(
        insert_for(session, FulfillmentClaim)
        .values(order_id=order_id, claimed_by=by, claimed_at=utcnow())
        .on_conflict_do_nothing(index_elements=[FulfillmentClaim.order_id])
        .returning(FulfillmentClaim.order_id)
    ).scalar_one_or_none()
    return claimed is not None


def _fulfill(session: Session, by: str, order_id: str, amount_cents: int, currency: str) -> int:
    fulfillment = (
        insert(Fulfillment)
        .values(
            event_id=by, order_id=order_id, amount_cents=amount_cents, currency=currency, created_at=utcnow()
        )
        .returning(Fulfillment.id)
    )
    fulfillment_id: int = session.execute(fulfillment).scalar_one()
    return fulfillment_id


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
