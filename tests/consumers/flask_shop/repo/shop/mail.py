"""Receipts, through the SMTP relay at ``SMTP_HOST``:``SMTP_PORT``."""

import os
import smtplib
from email.message import EmailMessage


def send_receipt(order_id: str, email: str, amount_cents: int) -> None:
    message = EmailMessage()
    message["From"] = "receipts@flask-shop.example"
    message["To"] = email
    message["Subject"] = f"Receipt for order {order_id}"
    message.set_content(f"We received {amount_cents / 100:.2f} for order {order_id}. Thank you!")
    with smtplib.SMTP(
        os.environ.get("SMTP_HOST", "localhost"), int(os.environ.get("SMTP_PORT", "25")), timeout=10
    ) as relay:
        relay.send_message(message)
