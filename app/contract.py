"""The handler seam: what a handler module receives and returns.

A handler module (``app.webhooks``, the live one; ``app.unsafe``, the reference unsafe one)
exposes one function, and a second for the customer's browser returning from checkout::

    def process(session: Session, delivery: Delivery) -> HandlerResult
    def complete_checkout(session: Session, checkout: CheckoutReturn) -> HandlerResult

It is called after the signature was verified and the body parsed and validated, inside a
write transaction that the caller commits after ``process`` returns (and rolls back if it
raises). A handler must not commit; it may flush and use savepoints. Any module with this
shape can replace another: copying one handler file over the other yields a working app.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Annotated, Any, Literal, Protocol

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field
from sqlalchemy.orm import Session

ORDER_PAID = "order.paid"
# An order's lifecycle (created -> paid -> refunded), and a sibling of order.paid that the
# payment provider sends for the same change: each moves the order to a status.
ORDER_CREATED = "order.created"
ORDER_REFUNDED = "order.refunded"
PAYMENT_SUCCEEDED = "payment.succeeded"
ORDER_STATUS = {
    ORDER_CREATED: "created",
    ORDER_PAID: "paid",
    PAYMENT_SUCCEEDED: "paid",
    ORDER_REFUNDED: "refunded",
}
FULFILLING = frozenset({ORDER_PAID, PAYMENT_SUCCEEDED})
CHECKOUT_RETURN = "checkout-return"  # who claims an order its browser return completed
MAX_AMOUNT_CENTS = 2**53 - 1  # stays exact in every JSON parser that reads it back


# No control characters: PostgreSQL cannot store NUL, and ids are for people too. (Unpaired
# surrogates, which no database can encode, are already refused by pydantic.) A pattern
# rather than a validator, so the OpenAPI document states the rule.
PRINTABLE = r"^[^\x00-\x1F\x7F]+$"

Token = Annotated[str, Field(min_length=1, max_length=255, pattern=PRINTABLE)]


def _whole_number(value: Any) -> Any:
    # JSON Schema's "integer" is any whole number, 1200.0 included; strings and booleans are not.
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError("must be a whole number (a JSON integer), not a string or boolean")
    if isinstance(value, float):
        if not value.is_integer():
            raise ValueError("must be a whole number of cents")
        return int(value)
    return value


Cents = Annotated[int, Field(ge=0, le=MAX_AMOUNT_CENTS), BeforeValidator(_whole_number)]


class OrderPaidData(BaseModel):
    """``data`` of an ``order.paid`` event."""

    model_config = ConfigDict(extra="allow")

    order_id: Token
    amount_cents: Cents
    currency: str = Field(pattern=r"^[A-Z]{3}$", description="ISO 4217 code, e.g. EUR")


class _Envelope(BaseModel):
    model_config = ConfigDict(extra="allow")

    id: Token
    timestamp: datetime


class WebhookEvent(_Envelope):
    """Any event: the envelope every delivery must have. Unknown types are acknowledged (202)."""

    type: Token
    data: dict[str, Any]


class OrderPaidEvent(_Envelope):
    """The event the fixture fulfills: ``{"id", "type": "order.paid", "timestamp", "data": {...}}``."""

    type: Literal["order.paid"]
    data: OrderPaidData


class PaymentSucceededEvent(_Envelope):
    """The payment provider's sibling of ``order.paid`` (same change, its own event id)."""

    type: Literal["payment.succeeded"]
    data: OrderPaidData


class OrderEventData(BaseModel):
    """``data`` of a lifecycle event (``order.created``, ``order.refunded``): the order it moves."""

    model_config = ConfigDict(extra="allow")

    order_id: Token
    amount_cents: Cents = 0
    currency: str = Field(default="EUR", pattern=r"^[A-Z]{3}$")


class CheckoutComplete(BaseModel):
    """The body of ``POST /checkout/{order_id}/complete``: the customer's browser back from paying."""

    model_config = ConfigDict(extra="allow")

    order_id: Token | None = None
    amount_cents: Cents = 0
    currency: str = Field(default="EUR", pattern=r"^[A-Z]{3}$")


@dataclass(frozen=True)
class CheckoutReturn:
    """A browser return, as the handler's ``complete_checkout`` receives it."""

    order_id: str
    amount_cents: int
    currency: str


@dataclass(frozen=True)
class Delivery:
    """A verified, parsed delivery.

    ``event_id`` is the dedupe key: the provider's event id (a header for most schemes, the
    body's ``id`` for Stripe), never a signature or a timestamp. ``order`` is set exactly
    when the event fulfils (``order.paid``, and its sibling ``payment.succeeded``).
    """

    event_id: str
    body: bytes
    body_sha256: str
    event: WebhookEvent | OrderPaidEvent | PaymentSucceededEvent
    order: OrderPaidData | None

    def lifecycle(self) -> OrderEventData | None:
        """The order a lifecycle or sibling event moves (None: another type, or no order id in it)."""
        if self.event.type not in ORDER_STATUS:
            return None
        data = self.event.data if isinstance(self.event.data, dict) else self.event.data.model_dump()
        try:
            return OrderEventData.model_validate(data)
        except ValueError:
            return None


@dataclass(frozen=True)
class HandlerResult:
    """What to answer: status code, JSON body, extra headers."""

    status_code: int
    body: Mapping[str, Any]
    headers: Mapping[str, str] = field(default_factory=dict)

    def body_json(self) -> str:
        """The body as compact JSON text (how receipts store it)."""
        return json.dumps(self.body, separators=(",", ":"), sort_keys=True)


class Handler(Protocol):
    """A handler module, as the app sees it (``complete_checkout`` is optional: the route says so)."""

    def process(self, session: Session, delivery: Delivery) -> HandlerResult: ...


def ack(delivery: Delivery, *, status: str, fulfillment_id: int | None = None) -> dict[str, Any]:
    """The body of a 2xx answer (shape of ``app.schemas.WebhookAck``)."""
    return {
        "event_id": delivery.event_id,
        "status": status,
        "order_id": delivery.order.order_id if delivery.order else _order_id(delivery),
        "fulfillment_id": fulfillment_id,
    }


def _order_id(delivery: Delivery) -> str | None:
    order = delivery.lifecycle()
    return order.order_id if order is not None else None
