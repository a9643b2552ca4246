"""A shop's order webhook, written as a FastAPI user would: SQLAlchemy models on SQLite,
Standard Webhooks signatures verified with the reference library.

``create_app(db_url, receipts=False)``: check-then-insert — look for the event, call the
payment provider (an await), then record the fulfillment. Two deliveries of one event that
overlap both pass the check. ``receipts=True``: the fix — claim the event with a unique
receipt in the same transaction as the fulfillment; a duplicate is answered from the
receipt, a different body under a used id with 409.
"""

from __future__ import annotations

import asyncio
import hashlib

from fastapi import FastAPI, HTTPException, Request
from sqlalchemy import String, create_engine, func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"


class Base(DeclarativeBase):
    pass


class Receipt(Base):
    __tablename__ = "receipts"
    event_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    body_sha256: Mapped[str] = mapped_column(String(64))


class Fulfillment(Base):
    __tablename__ = "fulfillments"
    id: Mapped[int] = mapped_column(primary_key=True)
    event_id: Mapped[str] = mapped_column(String(64), index=True)
    amount_cents: Mapped[int]


def count_fulfillments(db_url: str, event_id: str) -> int:
    """What a test counts with: the app's own models and a session of its own."""
    with Session(create_engine(db_url)) as session:
        return session.scalar(select(func.count()).where(Fulfillment.event_id == event_id)) or 0


async def charge(amount_cents: int) -> None:
    await asyncio.sleep(0.02)  # the payment provider's API


def create_app(db_url: str, *, receipts: bool = False) -> FastAPI:
    engine = create_engine(db_url, connect_args={"timeout": 30})
    Base.metadata.create_all(engine)
    verifier = Webhook(SECRET)
    app = FastAPI()

    @app.post("/webhooks/orders")
    async def orders(request: Request) -> dict[str, str]:
        body = await request.body()
        try:
            event = verifier.verify(body, dict(request.headers))
        except WebhookVerificationError as exc:
            raise HTTPException(401, str(exc)) from exc
        event_id, amount = event["id"], event["data"]["amount_cents"]
        if not receipts:
            with Session(engine) as session:
                if session.scalar(select(Fulfillment).where(Fulfillment.event_id == event_id)):
                    return {"status": "duplicate"}
            await charge(amount)
            with Session(engine) as session, session.begin():
                session.add(Fulfillment(event_id=event_id, amount_cents=amount))
            return {"status": "fulfilled"}
        digest = hashlib.sha256(body).hexdigest()
        await charge(amount)
        try:
            with Session(engine) as session, session.begin():
                session.add(Receipt(event_id=event_id, body_sha256=digest))
                session.flush()
                session.add(Fulfillment(event_id=event_id, amount_cents=amount))
        except IntegrityError:
            with Session(engine) as session:
                stored = session.get(Receipt, event_id)
            if stored is None or stored.body_sha256 != digest:
                raise HTTPException(409, "this event id was used for another body") from None
            return {"status": "duplicate"}
        return {"status": "fulfilled"}

    return app
