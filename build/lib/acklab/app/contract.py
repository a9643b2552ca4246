"""The handler seam: what a handler module receives and returns.

A handler module (``app.webhooks``, the live one; ``app.unsafe``, the reference unsafe one)
exposes exactly one function::

    def process(session: Session, delivery: Delivery) -> HandlerResult

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


@dataclass(frozen=True)
class Delivery:
    """A verified, parsed delivery.

    ``event_id`` is the dedupe key: the provider's event id (a header for most schemes, the
    body's ``id`` for Stripe), never a signature or a timestamp. ``order`` is set exactly
    when ``event.type == "order.paid"``.
    """

    event_id: str
    body: bytes
    body_sha256: str
    event: WebhookEvent | OrderPaidEvent
    order: OrderPaidData | None


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
    """A handler module, as the app sees it."""

    def process(self, session: Session, delivery: Delivery) -> HandlerResult: ...


def ack(delivery: Delivery, *, status: str, fulfillment_id: int | None = None) -> dict[str, Any]:
    """The body of a 2xx answer (shape of ``app.schemas.WebhookAck``)."""
    return {
        "event_id": delivery.event_id,
        "status": status,
        "order_id": delivery.order.order_id if delivery.order else None,
        "fulfillment_id": fulfillment_id,
    }
