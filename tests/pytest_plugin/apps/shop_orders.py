"""A shop's order webhook and its checkout return, written as a FastAPI user would (SQLAlchemy, SQLite).

Events (Standard Webhooks signatures): ``order.created``, ``order.paid`` (fulfils),
``order.refunded``, and the payment provider's ``payment.succeeded`` beside ``order.paid``;
``POST /orders/{order_id}/complete`` is the customer's browser back from paying (fulfils too).

``create_app(db_url, careful=False)``: every event sets the order's status as it arrives, each
fulfilling event and each browser return fulfils. ``careful=True``: an event moves the order
only when it is newer than the last one applied (its ``created`` second, compared strictly),
and one fulfilment per order is claimed (a unique row) in the fulfilment's transaction.
"""

from __future__ import annotations

from fastapi import FastAPI, HTTPException, Request
from sqlalchemy import Integer, String, create_engine, func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
STATUS = {
    "order.created": "created",
    "order.paid": "paid",
    "payment.succeeded": "paid",
    "order.refunded": "refunded",
}
FULFILLING = {"order.paid", "payment.succeeded"}


class Base(DeclarativeBase):
    pass


class Order(Base):
    __tablename__ = "orders"
    order_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    status: Mapped[str] = mapped_column(String(16))
    created: Mapped[int] = mapped_column(Integer, default=0)


class Claim(Base):
    __tablename__ = "claims"
    order_id: Mapped[str] = mapped_column(String(64), primary_key=True)


class Fulfillment(Base):
    __tablename__ = "fulfillments"
    id: Mapped[int] = mapped_column(primary_key=True)
    order_id: Mapped[str] = mapped_column(String(64), index=True)


def count_fulfillments(db_url: str, event_id: str, object_id: str) -> int:
    """The order's fulfilments, whoever made them (the test's effects callable)."""
    with Session(create_engine(db_url)) as session:
        return session.scalar(select(func.count()).where(Fulfillment.order_id == object_id)) or 0


def order_status(db_url: str, event_id: str, object_id: str) -> str | None:
    """The order's status (the test's state callable)."""
    with Session(create_engine(db_url)) as session:
        order = session.get(Order, object_id)
        return order.status if order is not None else None


def create_app(db_url: str, *, careful: bool = False) -> FastAPI:
    engine = create_engine(db_url, connect_args={"timeout": 30})
    Base.metadata.create_all(engine)
    verifier = Webhook(SECRET)
    app = FastAPI()

    def fulfil(session: Session, order_id: str) -> bool:
        if careful:
            try:
                with session.begin_nested():
                    session.add(Claim(order_id=order_id))
            except IntegrityError:
                return False
        session.add(Fulfillment(order_id=order_id))
        return True

    @app.post("/webhooks")
    async def webhooks(request: Request) -> dict[str, str]:
        body = await request.body()
        try:
            event = verifier.verify(body, dict(request.headers))
        except WebhookVerificationError as exc:
            raise HTTPException(401, str(exc)) from exc
        kind, data = event["type"], event["data"]
        if kind not in STATUS:
            return {"status": "ignored"}
        with Session(engine) as session, session.begin():
            order = session.get(Order, data["order_id"])
            if order is None:
                session.add(Order(order_id=data["order_id"], status=STATUS[kind], created=event["created"]))
            elif careful and event["created"] <= order.created:
                return {"status": "stale"}
            else:
                order.status, order.created = STATUS[kind], event["created"]
            fulfilled = kind in FULFILLING and fulfil(session, data["order_id"])
        return {"status": "fulfilled" if fulfilled else "applied"}

    @app.post("/orders/{order_id}/complete")
    def complete(order_id: str) -> dict[str, str]:
        with Session(engine) as session, session.begin():
            if session.get(Order, order_id) is None:
                session.add(Order(order_id=order_id, status="paid", created=0))
            fulfilled = fulfil(session, order_id)
        return {"status": "fulfilled" if fulfilled else "completed"}

    return app
