"""The sinks' logs (``sinks/smtp.json``, ``sinks/outbound.json``, ``sinks/provider_api.json``): every
message or call received.

Built by `acklab.harness.sinks.Sinks.documents`, written with the bundle; mirrors
``sinks.schema.json``.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from .base import Document, Omit
from .records import Count, Sha256, Timestamp


class SinkEntry(Document):
    """One message (``email``) or call (``call``) a sink received."""

    SCHEMA = "sinks#/properties/records/items"

    kind: Literal["email", "call", "api"]
    seq: Count
    at: Timestamp
    events: list[str]
    headers: dict[str, Annotated[str, Field(max_length=500)]]
    excerpt: Annotated[str, Field(max_length=8192)]
    sha256: Sha256
    bytes: Count
    capped: bool
    rows_at_arrival: dict[str, int | None]
    # email
    sender: str | None = None
    recipients: Omit[list[str]] = None
    # call (status null: the sink dropped the connection; idempotency_key null: none sent)
    method: str | None = None
    path: str | None = None
    route: int | None = None
    status: int | None = None
    idempotency_key: Annotated[str, Field(max_length=200)] | None = None
    # a fault the lab served instead of the effect: refused (an email), stalled (an email held, then 451), unavailable, lag, stale, throttled
    served: Omit[str] = None
    # api (the provider's API): the objects the call touched, the event a served fault was armed for,
    # whether it executed a change, answered from an idempotency key, and the events sent back first
    objects: Omit[list[str]] = None
    served_for: str | None = None
    effect: Omit[bool] = None
    replayed: Omit[bool] = None
    echoed: Omit[list[str]] = None


class SinkLimitsDoc(Document):
    SCHEMA = "sinks#/properties/limits"

    max_bytes: Annotated[int, Field(ge=1)]
    max_records: Annotated[int, Field(ge=1)]


class SinkLog(Document):
    """One sink's log for the run."""

    SCHEMA = "sinks"

    sink: Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]*$", max_length=40)]  # effects.<sink>
    records: list[SinkEntry]
    capped: Count
    dropped: Count
    limits: SinkLimitsDoc
