"""Shopify says an order was paid: ask the warehouse to ship it, and remember the shipment."""

from sqlalchemy.exc import IntegrityError

from .db import PaidOrder, Session
from .warehouse import ship


def order_paid(order: dict) -> None:
    order_id = str(order["id"])
    lines = [{"sku": line.get("sku"), "quantity": line.get("quantity", 1)} for line in order.get("line_items", [])]
    with Session() as session:
        if session.query(PaidOrder).filter_by(order_id=order_id).first() is not None:
            return  # a redelivery: shipped already
        shipment = ship(order_id, lines)
        session.add(PaidOrder(order_id=order_id, shipment=shipment))
        try:
            session.commit()
        except IntegrityError:  # a concurrent copy of the delivery recorded it first
            session.rollback()
