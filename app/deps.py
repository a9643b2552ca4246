"""FastAPI dependencies: the fixture, read sessions, and turning a request into a ``Delivery``.

Everything a handler may assume happens here, in this order: size limit (413), signature
(401), JSON and schema (422), dedupe key (422). Nothing is written before the handler runs.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Iterator, Mapping
from typing import Annotated, Any

from fastapi import Depends, Request
from pydantic import ValidationError
from sqlalchemy.orm import Session

from acklab.app.contract import (
    ORDER_PAID,
    PAYMENT_SUCCEEDED,
    Delivery,
    OrderPaidEvent,
    PaymentSucceededEvent,
    WebhookEvent,
)
from acklab.app.errors import Rejection
from acklab.app.runtime import Fixture
from acklab.app.schemes import SCHEMES, verify
from acklab.app.signing import VerificationFailed


def get_fixture(request: Request) -> Fixture:
    """The fixture this app was built with."""
    fixture: Fixture = request.app.state.fixture
    return fixture


FixtureDep = Annotated[Fixture, Depends(get_fixture)]


def get_session(fixture: FixtureDep) -> Iterator[Session]:
    """A read session for one request."""
    with Session(fixture.engine) as session:
        yield session


SessionDep = Annotated[Session, Depends(get_session)]


async def read_body(request: Request, limit: int) -> bytes:
    """The raw body, refused with 413 as soon as it (or its declared length) exceeds ``limit``."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise _too_large(int(declared), limit)
    chunks: list[bytes] = []
    size = 0
    # Count what actually arrives too: Content-Length may be absent (chunked) or wrong.
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise _too_large(size, limit, at_least=True)
        chunks.append(chunk)
    return b"".join(chunks)


def _too_large(size: int, limit: int, *, at_least: bool = False) -> Rejection:
    more = "at least " if at_least else ""
    return Rejection(
        413,
        "payload_too_large",
        f"the body is {more}{size} bytes; the limit is {limit} bytes (ACKLAB_MAX_BODY_BYTES)",
    )


def check_signature(fixture: Fixture, headers: Mapping[str, str], body: bytes) -> None:
    """401 unless the delivery is signed with the fixture's secret under its scheme."""
    settings = fixture.settings
    secret = settings.secret.get_secret_value() if settings.secret else ""
    try:
        verify(settings.scheme, secret, headers, body, tolerance_s=settings.tolerance_s)
    except VerificationFailed as exc:
        raise Rejection(401, exc.reason, exc.detail) from None


# Event types whose data the fixture reads (the fulfilling ones); any other type is a WebhookEvent.
TYPED_EVENTS: dict[str, type[OrderPaidEvent] | type[PaymentSucceededEvent]] = {
    ORDER_PAID: OrderPaidEvent,
    PAYMENT_SUCCEEDED: PaymentSucceededEvent,
}


def parse_event(body: bytes) -> WebhookEvent | OrderPaidEvent | PaymentSucceededEvent:
    """The event in ``body``; 422 naming every offending field."""
    try:
        raw: Any = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise Rejection(
            422,
            "malformed_json",
            f"the body is not valid UTF-8 JSON: {exc}",
            fields=[{"field": "body", "message": str(exc)}],
        ) from None
    kind = raw.get("type") if isinstance(raw, dict) else None
    model: type[WebhookEvent] | type[OrderPaidEvent] | type[PaymentSucceededEvent] = WebhookEvent
    if isinstance(kind, str) and kind in TYPED_EVENTS:
        model = TYPED_EVENTS[kind]
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        fields = [
            {"field": ".".join(str(part) for part in error["loc"]) or "body", "message": error["msg"]}
            for error in exc.errors(include_url=False)
        ]
        listed = "; ".join(f"{f['field']}: {f['message']}" for f in fields)
        event_id = raw.get("id") if isinstance(raw, dict) and isinstance(raw.get("id"), str) else None
        raise Rejection(
            422,
            "invalid_event",
            f"the event does not match the schema: {listed}",
            event_id=event_id,
            fields=fields,
        ) from None


_EVENT_ID = re.compile(r"[^\x00-\x1F\x7F]{1,255}")


def dedupe_key(
    scheme: str, headers: Mapping[str, str], event: WebhookEvent | OrderPaidEvent | PaymentSucceededEvent
) -> str:
    """The provider's event id: a header for most schemes, the body's ``id`` for Stripe."""
    names = SCHEMES[scheme].dedupe_headers
    if not names:
        return event.id
    for name in names:
        value = headers.get(name.lower())
        if value:
            if not _EVENT_ID.fullmatch(value):
                raise Rejection(
                    422,
                    "invalid_event_id",
                    f"header {name} must be 1-255 printable characters",
                    fields=[{"field": f"header.{name}", "message": "1-255 printable characters"}],
                )
            return value
    raise Rejection(
        422,
        "missing_event_id",
        f"missing header {names[0]}: the {scheme} scheme takes the event id (dedupe key) from it",
        event_id=event.id,
        fields=[{"field": f"header.{names[0]}", "message": "required"}],
    )


async def read_delivery(request: Request, fixture: FixtureDep) -> Delivery:
    """Turn the request into a verified, parsed ``Delivery`` or refuse it (``Rejection``)."""
    body = await read_body(request, fixture.settings.max_body_bytes)
    # The server has the whole request (the route answers it as X-Acklab-Received-Ns).
    request.state.received_ns = time.monotonic_ns()
    headers = {name.lower(): value for name, value in request.headers.items()}
    check_signature(fixture, headers, body)
    event = parse_event(body)
    return Delivery(
        event_id=dedupe_key(fixture.settings.scheme, headers, event),
        body=body,
        body_sha256=hashlib.sha256(body).hexdigest(),
        event=event,
        order=event.data if isinstance(event, OrderPaidEvent | PaymentSucceededEvent) else None,
    )


DeliveryDep = Annotated[Delivery, Depends(read_delivery)]
