"""The reference unsafe handler: fulfills on every delivery, with no dedupe at all.

It exists so the lab can show what it catches: a retry, a lost acknowledgement or a burst
of concurrent duplicates each add another fulfillment. Same interface as ``app.webhooks``
(see ``app.contract``), so either file can be copied over the other.
"""

from __future__ import annotations

from sqlalchemy import insert
from sqlalchemy.orm import Session

from acklab.app.contract import Delivery, HandlerResult, ack
from acklab.app.db import insert_for
from acklab.app.models import Fulfillment, Order, utcnow


def process(session: Session, delivery: Delivery) -> HandlerResult:
    """Fulfill every ``order.paid`` delivery, duplicates included; acknowledge other types."""
    order = delivery.order
    if order is None:
        return HandlerResult(202, ack(delivery, status="acknowledged"))
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
    fulfillment_id = session.execute(
        insert(Fulfillment)
        .values(
            event_id=delivery.event_id,
            order_id=order.order_id,
            amount_cents=order.amount_cents,
            currency=order.currency,
            created_at=now,
        )
        .returning(Fulfillment.id)
    ).scalar_one()
    return HandlerResult(200, ack(delivery, status="fulfilled", fulfillment_id=fulfillment_id))
