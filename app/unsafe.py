"""The reference unsafe handler: fulfills on every delivery, with no dedupe at all.

It exists so the lab can show what it catches: a retry, a lost acknowledgement or a burst
of concurrent duplicates each add another fulfillment; an order's events are applied in the
order they arrive (a late ``order.created`` takes a refunded order back to ``created``); the
sibling ``payment.succeeded`` fulfils the order again; and the customer's browser returning
from checkout fulfils it once more. It emails the customer and asks the warehouse to ship
(``app.notify``) before its transaction commits, and without an idempotency key. Same interface as ``app.webhooks`` (see
``app.contract``), so either file can be copied over the other.
"""

from __future__ import annotations

from sqlalchemy import insert
from sqlalchemy.orm import Session

from acklab.app.contract import CHECKOUT_RETURN, ORDER_STATUS, CheckoutReturn, Delivery, HandlerResult, ack
from acklab.app.db import insert_for
from acklab.app.models import Fulfillment, Order, utcnow
from acklab.app.notify import confirm_fulfillment


def process(session: Session, delivery: Delivery) -> HandlerResult:
    """Apply every order event as it arrives and fulfil every fulfilling one, duplicates included."""
    order = delivery.lifecycle()
    if order is None:
        return HandlerResult(202, ack(delivery, status="acknowledged"))
    _set_status(
        session, order.order_id, ORDER_STATUS[delivery.event.type], order.amount_cents, order.currency
    )
    if delivery.order is None:  # not a fulfilling event
        return HandlerResult(200, ack(delivery, status="applied"))
    fulfillment_id = _fulfill(session, delivery.event_id, order.order_id, order.amount_cents, order.currency)
    confirm_fulfillment(session, order.order_id, idempotency_key=None)  # before the commit, and unkeyed
    return HandlerResult(200, ack(delivery, status="fulfilled", fulfillment_id=fulfillment_id))


def complete_checkout(session: Session, checkout: CheckoutReturn) -> HandlerResult:
    """Fulfil the order whenever the browser comes back, whoever fulfilled it before."""
    _set_status(session, checkout.order_id, "paid", checkout.amount_cents, checkout.currency)
    fulfillment_id = _fulfill(
        session, CHECKOUT_RETURN, checkout.order_id, checkout.amount_cents, checkout.currency
    )
    return HandlerResult(
        200, {"order_id": checkout.order_id, "status": "fulfilled", "fulfillment_id": fulfillment_id}
    )


def _set_status(session: Session, order_id: str, status: str, amount_cents: int, currency: str) -> None:
    values = {"status": status, "amount_cents": amount_cents, "currency": currency, "updated_at": utcnow()}
    session.execute(
        insert_for(session, Order)
        .values(order_id=order_id, **values)
        .on_conflict_do_update(index_elements=[Order.order_id], set_=values)
    )


def _fulfill(session: Session, by: str, order_id: str, amount_cents: int, currency: str) -> int:
    fulfillment_id: int = session.execute(
        insert(Fulfillment)
        .values(
            event_id=by, order_id=order_id, amount_cents=amount_cents, currency=currency, created_at=utcnow()
        )
        .returning(Fulfillment.id)
    ).scalar_one()
    return fulfillment_id
