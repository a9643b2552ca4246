"""Response bodies of the fixture's HTTP API (what the OpenAPI document promises)."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field


class WebhookAck(BaseModel):
    """A 2xx answer to a delivery: 200 ``fulfilled`` or 202 ``acknowledged`` (unknown event type).

    A retry of an already processed event gets the stored answer again, byte for byte, with
    the header ``Idempotent-Replayed: true``.
    """

    event_id: str = Field(description="The dedupe key the fixture used (the provider's event id).")
    status: Literal["fulfilled", "acknowledged", "applied", "stale"]
    order_id: str | None
    fulfillment_id: int | None


class FieldError(BaseModel):
    """One schema violation: a dotted field path (``data.amount_cents``) and what is wrong."""

    field: str
    message: str


class ErrorBody(BaseModel):
    """Every non-2xx answer of the fixture: a stable ``error`` code and a ``detail`` for people."""

    error: str = Field(description="e.g. invalid_signature, stale_timestamp, conflict, invalid_event")
    detail: str
    event_id: str | None = None
    fields: list[FieldError] = Field(default_factory=list)


class Health(BaseModel):
    """Liveness and what this instance runs."""

    status: Literal["ok"]
    handler: Literal["live", "unsafe"]
    scheme: str = Field(description="The provider signature scheme verified (one of app.schemes).")
    database: Literal["sqlite", "postgresql"]


class FulfillmentOut(BaseModel):
    """One fulfillment (the side effect) of an order."""

    id: int
    event_id: str
    amount_cents: int
    currency: str
    created_at: datetime


class OrderOut(BaseModel):
    """An order and every fulfillment recorded for it, oldest first."""

    order_id: str
    status: str
    amount_cents: int
    currency: str
    updated_at: datetime
    fulfillments: list[FulfillmentOut]


class Effects(BaseModel):
    """The lab's effects probe: how many fulfillments carry this event id (0 if none)."""

    event_id: str
    count: int = Field(ge=0)


class OrderEffects(BaseModel):
    """The lab's effects probe for one order: its fulfillments (by any event or the browser return)
    and its status (None: no such order yet)."""

    order_id: str
    count: int = Field(ge=0)
    status: str | None


class CheckoutAck(BaseModel):
    """The answer to a browser return: the order completed (or already completed, 409 with an error)."""

    order_id: str
    status: Literal["fulfilled", "completed"]
    fulfillment_id: int | None
