"""The payment service tells the shop an order was paid (Standard Webhooks): ship it, mail the receipt."""

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

from .db import Session, Shipment
from .mail import send_receipt


def order_paid(message_id: str, event: dict) -> None:
    if event.get("type") != "order.paid":
        return
    data = event["data"]
    with Session() as session:
        if session.scalar(select(Shipment).where(Shipment.message_id == message_id)) is not None:
            return  # a redelivery: shipped and mailed already
        send_receipt(data["order_id"], data["email"], data["amount_cents"])
        session.add(Shipment(message_id=message_id, order_id=data["order_id"], amount_cents=data["amount_cents"]))
        try:
            session.commit()
        except IntegrityError:  # a concurrent copy of the message shipped it first
            session.rollback()
