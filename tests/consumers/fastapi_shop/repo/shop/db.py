"""The shop's database: SQLAlchemy on ``SHOP_DB_URL`` (``sqlite:///orders.db`` by default)."""

import os

from sqlalchemy import Integer, String, create_engine
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, sessionmaker

engine = create_engine(os.environ.get("SHOP_DB_URL", "sqlite:///orders.db"), connect_args={"timeout": 20})
Session = sessionmaker(engine)


class Base(DeclarativeBase):
    pass


class PaidOrder(Base):
    """A Shopify order the shop was told is paid, and the shipment the warehouse made for it."""

    __tablename__ = "paid_orders"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    order_id: Mapped[str] = mapped_column(String(64), unique=True)
    shipment: Mapped[str | None] = mapped_column(String(64), nullable=True)


def create_tables() -> None:
    Base.metadata.create_all(engine)
