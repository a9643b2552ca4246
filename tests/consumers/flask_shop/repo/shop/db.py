"""The shop's database: SQLAlchemy on ``SHOP_DATABASE_URL`` (``sqlite:///shop.db`` by default)."""

import os

from sqlalchemy import Integer, String, create_engine
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, sessionmaker

engine = create_engine(os.environ.get("SHOP_DATABASE_URL", "sqlite:///shop.db"), connect_args={"timeout": 20})
Session = sessionmaker(engine)


class Base(DeclarativeBase):
    pass


class Shipment(Base):
    """One paid order on its way: at most one per webhook message."""

    __tablename__ = "shipments"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    message_id: Mapped[str] = mapped_column(String(128), unique=True)
    order_id: Mapped[str] = mapped_column(String(64), index=True)
    amount_cents: Mapped[int] = mapped_column(Integer)


Base.metadata.create_all(engine)
