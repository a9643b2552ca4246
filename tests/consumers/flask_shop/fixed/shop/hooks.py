"""The payment service tells the shop an order was paid (Standard Webhooks): ship it, mail the receipt."""

from sqlalchemy.exc import IntegrityError

from .db import Session, Shipment
from .mail import send_receipt


def order_paid(message_id: str, event: dict) -> None:
    if event.get("type") != "order.paid":
        return
    data = event["data"]
    with Session() as session:
        # The shipment first: its unique message id claims the message, and only the delivery
        # whose claim committed mails the receipt.
        session.add(
            Shipment(message_id=message_id, order_id=data["order_id"], amount_cents=data["amount_cents"])
        )
        try:
            session.commit()
        except IntegrityError:
            return
    send_receipt(data["order_id"], data["email"], data["amount_cents"])
