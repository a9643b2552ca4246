"""Typed SQLAlchemy 2.0 models: orders, their fulfillments (the side effect), and receipts.

``fulfillments`` deliberately has no unique constraint on ``event_id`` nor on ``order_id``:
the invariants "one event, at most one fulfillment" and "one order, at most one fulfillment"
are the handler's job (receipts, fulfillment claims), and the lab must be able to observe a
handler that breaks them.
"""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import BigInteger, DateTime, Dialect, ForeignKey, Integer, String, Text, TypeDecorator
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

ID_LENGTH = 255


def utcnow() -> datetime:
    """Timezone-aware now, for timestamp columns."""
    return datetime.now(UTC)


class UTCDateTime(TypeDecorator[datetime]):
    """A timestamp that reads back timezone-aware UTC on every backend (SQLite drops the zone)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        return value.astimezone(UTC) if value is not None else None

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class Base(DeclarativeBase):
    """Declarative base of the fixture's tables."""


class Order(Base):
    """An order as last reported by an ``order.paid`` event."""

    __tablename__ = "orders"

    order_id: Mapped[str] = mapped_column(String(ID_LENGTH), primary_key=True)
    status: Mapped[str] = mapped_column(String(32))
    amount_cents: Mapped[int] = mapped_column(BigInteger)
    currency: Mapped[str] = mapped_column(String(3))
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    # The creation time of the newest event applied to this order (its watermark); None: no
    # event set the status yet (the order came from the browser return).
    event_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)

    fulfillments: Mapped[list[Fulfillment]] = relationship(
        back_populates="order", order_by="Fulfillment.id", lazy="selectin"
    )


class Fulfillment(Base):
    """The side effect of an order event: counted per ``event_id`` by the lab's effects probe."""

    __tablename__ = "fulfillments"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    event_id: Mapped[str] = mapped_column(String(ID_LENGTH), index=True)
    order_id: Mapped[str] = mapped_column(ForeignKey("orders.order_id"), index=True)
    amount_cents: Mapped[int] = mapped_column(BigInteger)
    currency: Mapped[str] = mapped_column(String(3))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)

    order: Mapped[Order] = relationship(back_populates="fulfillments")


class Receipt(Base):
    """One received event: its body's digest and the response given, to replay it on retries.

    ``event_id`` is the provider's dedupe key and is unique: the database, not a prior
    SELECT, decides which of several concurrent deliveries processes the event.
    """

    __tablename__ = "receipts"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    event_id: Mapped[str] = mapped_column(String(ID_LENGTH), unique=True)
    body_sha256: Mapped[str] = mapped_column(String(64))
    event_type: Mapped[str] = mapped_column(String(ID_LENGTH))
    status: Mapped[str] = mapped_column(String(32))
    response_status: Mapped[int | None] = mapped_column(Integer)
    response_body: Mapped[str | None] = mapped_column(Text)
    received_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class FulfillmentClaim(Base):
    """Who fulfilled an order: the one claim per order, made in the transaction of the fulfillment.

    ``order_id`` is the primary key: of a webhook and the customer's browser returning at the
    same moment (or of two sibling events), the database lets one claim the order.
    """

    __tablename__ = "fulfillment_claims"

    order_id: Mapped[str] = mapped_column(String(ID_LENGTH), primary_key=True)
    claimed_by: Mapped[str] = mapped_column(String(ID_LENGTH))  # an event id, or "checkout-return"
    claimed_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
