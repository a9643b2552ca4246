"""Shopify says an order was paid: ask the warehouse to ship it, and remember the shipment."""

from sqlalchemy.exc import IntegrityError

from .db import PaidOrder, Session
from .warehouse import ship


def order_paid(order: dict) -> None:
    order_id = str(order["id"])
    lines = [
        {"sku": line.get("sku"), "quantity": line.get("quantity", 1)} for line in order.get("line_items", [])
    ]
    with Session() as session:
        # The order's row claims it; only the delivery whose claim committed asks for a shipment,
        # under a key the warehouse dedupes on should that request be retried.
        claim = PaidOrder(order_id=order_id)
        session.add(claim)
        try:
            session.commit()
        except IntegrityError:
            return
        claim.shipment = ship(order_id, lines, key=f"ship-{order_id}")
        session.commit()
