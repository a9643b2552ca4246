"""What the fixture tells the world when it fulfils an order: a confirmation email and a shipment
request to the warehouse API.

Both are optional: without ``ACKLAB_SMTP_PORT`` no email is sent, without
``ACKLAB_WAREHOUSE_URL`` no call is made (the fixture then behaves as it always did). The lab
points them at its sinks (``effects.smtp``, ``effects.outbound``) to count what a handler sends.

The handler decides *when*: `after_commit` defers an action until its transaction committed
(a rolled-back delivery tells nobody), and the shipment request carries the idempotency key the
handler gives it (the event's id: a retried request is one shipment), or none.
"""

from __future__ import annotations

import contextlib
import smtplib
from collections.abc import Callable
from dataclasses import dataclass
from email.message import EmailMessage
from typing import Any

import httpx
from sqlalchemy import event
from sqlalchemy.orm import Session

NOTIFIER = "acklab.notify"  # the key of the session's `Notifier` in ``session.info``
SHIPMENTS_PATH = "/v1/shipments"


@dataclass(frozen=True)
class Notifier:
    """Where a fulfilment is told: the SMTP port on loopback, the warehouse API's base URL."""

    smtp_port: int | None = None
    warehouse_url: str | None = None


def _notifier(session: Session) -> Notifier:
    found = session.info.get(NOTIFIER)
    return found if isinstance(found, Notifier) else Notifier()


def confirm_fulfillment(session: Session, order_id: str, *, idempotency_key: str | None) -> None:
    """Email the customer that `order_id` ships, and ask the warehouse to ship it."""
    notifier = _notifier(session)
    if notifier.smtp_port is not None:
        message = EmailMessage()
        message["From"], message["To"] = "orders@acklab.test", "customer@acklab.test"
        message["Subject"] = f"Your order {order_id} is on its way"
        message.set_content(f"We are preparing order {order_id} for shipment.")
        # A lost email is the customer's inconvenience, not a reason to fail the delivery.
        with (
            contextlib.suppress(OSError, smtplib.SMTPException),
            smtplib.SMTP("127.0.0.1", notifier.smtp_port, timeout=5) as smtp,
        ):
            smtp.send_message(message)
    if notifier.warehouse_url is not None:
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key is not None else {}
        with contextlib.suppress(httpx.HTTPError):
            httpx.post(
                notifier.warehouse_url + SHIPMENTS_PATH,
                json={"order_id": order_id},
                headers=headers,
                timeout=5,
                trust_env=False,
            )


def after_commit(session: Session, action: Callable[..., None], *args: Any, **kwargs: Any) -> None:
    """Run `action(session, *args, **kwargs)` once the session's transaction committed (never
    after a rollback)."""

    def run(committed: Session) -> None:
        action(committed, *args, **kwargs)

    event.listen(session, "after_commit", run, once=True)
