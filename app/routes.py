"""HTTP endpoints: the webhook, the browser return from checkout, health, orders, and the lab's effects probes."""

from __future__ import annotations

import time
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Path, Request, Response
from sqlalchemy import func, select, text
from starlette.concurrency import run_in_threadpool

from acklab.app.contract import PRINTABLE, CheckoutComplete, CheckoutReturn, Delivery, HandlerResult
from acklab.app.deps import DeliveryDep, FixtureDep, SessionDep
from acklab.app.errors import Rejection
from acklab.app.models import Fulfillment, Order
from acklab.app.runtime import Fixture
from acklab.app.schemas import (
    CheckoutAck,
    Effects,
    ErrorBody,
    FulfillmentOut,
    Health,
    OrderEffects,
    OrderOut,
    WebhookAck,
)

router = APIRouter(
    responses={503: {"model": ErrorBody, "description": "The database is unreachable; retry later."}}
)

# CLOCK_MONOTONIC is one clock for every process of a machine: a lab on the same host can
# compare these readings across deliveries (it never reads anything else into them).
ENTERED_HEADER = "X-Acklab-Entered-Ns"
# When the server had the whole request (its last body byte read, the route about to verify
# it): the server's side of a burst's arrival spread, before the handoff to the handler.
RECEIVED_HEADER = "X-Acklab-Received-Ns"

REPLAYED_HEADER = {
    "Idempotent-Replayed": {
        "description": "'true' when this answer replays the stored answer to an earlier delivery.",
        "schema": {"type": "string", "enum": ["true"]},
    },
    ENTERED_HEADER: {
        "description": "When the delivery entered the handler: CLOCK_MONOTONIC in nanoseconds.",
        "schema": {"type": "string", "pattern": "^[0-9]+$"},
    },
    RECEIVED_HEADER: {
        "description": "When the server had read the whole request: CLOCK_MONOTONIC in nanoseconds.",
        "schema": {"type": "string", "pattern": "^[0-9]+$"},
    },
}

WEBHOOK_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"model": WebhookAck, "description": "Fulfilled (or a replay of it).", "headers": REPLAYED_HEADER},
    202: {
        "model": WebhookAck,
        "description": "Unknown event type: acknowledged and recorded, nothing fulfilled.",
        "headers": REPLAYED_HEADER,
    },
    401: {
        "model": ErrorBody,
        "description": "Missing, malformed or wrong signature; stale or future timestamp.",
    },
    409: {"model": ErrorBody, "description": "This event id was already received with a different body."},
    413: {"model": ErrorBody, "description": "The body exceeds ACKLAB_MAX_BODY_BYTES."},
    422: {"model": ErrorBody, "description": "Malformed JSON, a schema violation, or no event id."},
}


@router.post(
    "/webhooks/orders",
    response_model=WebhookAck,
    responses=WEBHOOK_RESPONSES,
    summary="Receive an order event",
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/OrderPaidEvent"}}},
        }
    },
)
async def receive_order_event(request: Request, delivery: DeliveryDep, fixture: FixtureDep) -> Response:
    """Verify, parse and hand the delivery to the configured handler; answer what it returns.

    Other event types than ``order.paid`` are accepted with any object as ``data``. The
    ``X-Acklab-Entered-Ns`` header says when the delivery entered the handler (the
    monotonic clock in nanoseconds): a lab measures how close together a burst arrived.
    ``X-Acklab-Received-Ns`` says when the server had read the whole request.
    """
    entered, result = await run_in_threadpool(_timed_delivery, fixture, delivery)
    # The handler's JSON text goes out as is, so a replay is byte-identical to the original.
    return Response(
        content=result.body_json(),
        status_code=result.status_code,
        headers={
            **result.headers,
            ENTERED_HEADER: str(entered),
            RECEIVED_HEADER: str(request.state.received_ns),
        },
        media_type="application/json",
    )


def _timed_delivery(fixture: Fixture, delivery: Delivery) -> tuple[int, HandlerResult]:
    # Taken in the worker thread, right before the handler's transaction: where a race starts.
    entered = time.monotonic_ns()
    return entered, fixture.deliver(delivery)


@router.get("/health", response_model=Health, summary="Liveness, handler, scheme and database")
def health(fixture: FixtureDep, session: SessionDep) -> Health:
    """Answer ``ok`` once the database answers a trivial query."""
    session.execute(text("SELECT 1"))
    settings = fixture.settings
    database: Literal["sqlite", "postgresql"] = (
        "postgresql" if fixture.engine.dialect.name == "postgresql" else "sqlite"
    )
    return Health(status="ok", handler=settings.handler, scheme=settings.scheme, database=database)


@router.get(
    "/orders/{order_id}",
    response_model=OrderOut,
    responses={404: {"model": ErrorBody, "description": "No event has reported this order."}},
    summary="An order and its fulfillments",
)
def get_order(order_id: str, session: SessionDep) -> OrderOut:
    """The order as last reported, with every fulfillment recorded for it."""
    order = session.get(Order, order_id)
    if order is None:
        raise Rejection(404, "not_found", f"no order {order_id!r}; no order.paid event has named it")
    return OrderOut(
        order_id=order.order_id,
        status=order.status,
        amount_cents=order.amount_cents,
        currency=order.currency,
        updated_at=order.updated_at,
        fulfillments=[
            FulfillmentOut(
                id=f.id,
                event_id=f.event_id,
                amount_cents=f.amount_cents,
                currency=f.currency,
                created_at=f.created_at,
            )
            for f in order.fulfillments
        ],
    )


@router.get("/events/{event_id}/effects", response_model=Effects, summary="The lab's effects probe")
def get_effects(event_id: str, session: SessionDep) -> Effects:
    """How many fulfillments carry ``event_id`` (0 when the event is unknown)."""
    count = session.execute(
        select(func.count()).select_from(Fulfillment).where(Fulfillment.event_id == event_id)
    )
    return Effects(event_id=event_id, count=count.scalar_one())


@router.post(
    "/checkout/{order_id}/complete",
    response_model=CheckoutAck,
    responses={
        409: {"model": ErrorBody, "description": "The order was completed already."},
        501: {"model": ErrorBody, "description": "The handler module has no complete_checkout."},
    },
    summary="The customer's browser back from paying: complete the order",
)
async def complete_checkout(
    order_id: Annotated[str, Path(min_length=1, max_length=255, pattern=PRINTABLE)],
    fixture: FixtureDep,
    body: CheckoutComplete | None = None,
) -> Response:
    """Complete the order the way the handler module's ``complete_checkout`` does (it races the
    payment webhook for the same order). Answers with ``X-Acklab-Entered-Ns`` like the webhook."""
    given = body or CheckoutComplete()
    checkout = CheckoutReturn(order_id=order_id, amount_cents=given.amount_cents, currency=given.currency)
    entered, result = await run_in_threadpool(_timed_checkout, fixture, checkout)
    if result is None:
        raise Rejection(
            501, "not_implemented", "this handler module has no complete_checkout(session, checkout)"
        )
    return Response(
        content=result.body_json(),
        status_code=result.status_code,
        headers={**result.headers, ENTERED_HEADER: str(entered)},
        media_type="application/json",
    )


def _timed_checkout(fixture: Fixture, checkout: CheckoutReturn) -> tuple[int, HandlerResult | None]:
    entered = time.monotonic_ns()
    return entered, fixture.complete_checkout(checkout)


@router.get("/orders/{order_id}/effects", response_model=OrderEffects, summary="The lab's probe of one order")
def get_order_effects(order_id: str, session: SessionDep) -> OrderEffects:
    """How many fulfillments the order has (whoever made them), and its status."""
    count = session.execute(
        select(func.count()).select_from(Fulfillment).where(Fulfillment.order_id == order_id)
    ).scalar_one()
    order = session.get(Order, order_id)
    return OrderEffects(order_id=order_id, count=count, status=order.status if order is not None else None)
