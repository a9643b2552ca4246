"""A user's own repository, as a new user of acklab has one: a Flask + SQLAlchemy shop.

`make_flask_shop(directory)` writes it and commits it with ``git init``. It imports nothing of
acklab: its webhook handler (``shop/hooks.py``) fulfils every ``order.paid`` delivery, and
records the event only afterwards, as an upsert (``session.merge``), so a redelivery after a
lost acknowledgement ships the order twice — the bug the repair flow is asked to fix. Its
own tests pass at that head (they never redeliver). Its target spec ``shop.target.yaml`` serves
it with gunicorn on ``{{port}}``, its database in ``{{scratch}}`` (SQLite) or on
``{{database_url}}`` (PostgreSQL, ``postgres=True``), its tables made by ``setup:`` (the
project's migration). `REPAIR` is the repair a model would propose: claim the event id in the
fulfilment's own transaction, and answer a reused id with another body 409.
"""

from __future__ import annotations

import subprocess
import textwrap
from pathlib import Path

SECRET = "shop-webhook-secret-0123456789"

HOOKS = '''\
"""What the shop does when the payment provider says an order was paid."""

from __future__ import annotations

import hashlib
import json

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from shop.models import Fulfillment, Order, ProcessedEvent


def digest(event: dict) -> str:
    return hashlib.sha256(json.dumps(event, sort_keys=True).encode()).hexdigest()


def handle(session: Session, event: dict) -> tuple[int, dict]:
    """Fulfil a paid order; (HTTP status, answer)."""
    if event.get("type") != "order.paid":
        return 200, {"ignored": event.get("type")}
    data = event["data"]
    order = session.get(Order, data["order_id"])
    if order is None:
        order = Order(order_id=data["order_id"], status="new")
        session.add(order)
        try:
            session.flush()
        except IntegrityError:
            session.rollback()
            order = session.get(Order, data["order_id"])
    session.add(Fulfillment(event_id=event["id"], order_id=order.order_id, amount_cents=data["amount_cents"]))
    order.status = "paid"
    session.commit()
    # Remember the event for the audit log.
    session.merge(ProcessedEvent(event_id=event["id"], digest=digest(event)))
    session.commit()
    return 200, {"fulfilled": order.order_id}
'''

# What a model answers: the event is claimed in the fulfilment's transaction; a reused id is
# answered without a second shipment (200 for the same body, 409 for another one).
REPAIRED = '''\
"""What the shop does when the payment provider says an order was paid."""

from __future__ import annotations

import hashlib
import json

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from shop.models import Fulfillment, Order, ProcessedEvent


def digest(event: dict) -> str:
    return hashlib.sha256(json.dumps(event, sort_keys=True).encode()).hexdigest()


def handle(session: Session, event: dict) -> tuple[int, dict]:
    """Fulfil a paid order once per event id; (HTTP status, answer)."""
    if event.get("type") != "order.paid":
        return 200, {"ignored": event.get("type")}
    data = event["data"]
    try:
        # The claim and the fulfilment commit together: a redelivery finds the claim.
        session.add(ProcessedEvent(event_id=event["id"], digest=digest(event)))
        session.flush()
    except IntegrityError:
        session.rollback()
        seen = session.get(ProcessedEvent, event["id"])
        if seen is not None and seen.digest != digest(event):
            return 409, {"conflict": event["id"]}
        return 200, {"duplicate": event["id"]}
    order = session.get(Order, data["order_id"])
    if order is None:
        order = Order(order_id=data["order_id"], status="new")
        session.add(order)
        session.flush()  # the order row first: the fulfilment's foreign key names it
    session.add(Fulfillment(event_id=event["id"], order_id=order.order_id, amount_cents=data["amount_cents"]))
    order.status = "paid"
    try:
        session.commit()
    except IntegrityError:
        session.rollback()
        return 200, {"duplicate": event["id"]}
    return 200, {"fulfilled": order.order_id}
'''

FILES = {
    "shop/__init__.py": "",
    "shop/models.py": '''\
        from __future__ import annotations

        from sqlalchemy import ForeignKey, Integer, String
        from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


        class Base(DeclarativeBase):
            pass


        class Order(Base):
            __tablename__ = "orders"
            order_id: Mapped[str] = mapped_column(String(64), primary_key=True)
            status: Mapped[str] = mapped_column(String(16))


        class Fulfillment(Base):
            __tablename__ = "fulfillments"
            id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
            event_id: Mapped[str] = mapped_column(String(128), index=True)
            order_id: Mapped[str] = mapped_column(ForeignKey("orders.order_id"))
            amount_cents: Mapped[int] = mapped_column(Integer)


        class ProcessedEvent(Base):
            """Events the shop has handled (for the audit log, and to spot redeliveries)."""

            __tablename__ = "processed_events"
            event_id: Mapped[str] = mapped_column(String(128), primary_key=True)
            digest: Mapped[str] = mapped_column(String(64))
        ''',
    "shop/db.py": """\
        from __future__ import annotations

        import os

        from sqlalchemy import create_engine
        from sqlalchemy.orm import sessionmaker


        def engine(url: str | None = None):
            url = url or os.environ["SHOP_DATABASE_URL"]
            if url.startswith("sqlite"):
                return create_engine(url, connect_args={"timeout": 30})
            return create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1))


        def sessions(url: str | None = None) -> sessionmaker:
            return sessionmaker(engine(url), expire_on_commit=False)
        """,
    "shop/migrate.py": '''\
        """Create the shop's tables (what `alembic upgrade head` does in production)."""

        from shop.db import engine
        from shop.models import Base

        if __name__ == "__main__":
            Base.metadata.create_all(engine())
        ''',
    "shop/app.py": """\
        from __future__ import annotations

        import hashlib
        import hmac
        import json
        import os

        from flask import Flask, jsonify, request

        from shop import hooks
        from shop.db import sessions


        def create_app(database_url: str | None = None, secret: str | None = None) -> Flask:
            app = Flask(__name__)
            make_session = sessions(database_url)
            key = (secret or os.environ["SHOP_WEBHOOK_SECRET"]).encode()

            @app.post("/webhooks/orders")
            def orders():
                body = request.get_data()
                expected = "sha256=" + hmac.new(key, body, hashlib.sha256).hexdigest()
                if not hmac.compare_digest(expected, request.headers.get("X-Hub-Signature-256", "")):
                    return jsonify(error="bad signature"), 401
                with make_session() as session:
                    status, answer = hooks.handle(session, json.loads(body))
                return jsonify(answer), status

            @app.get("/healthz")
            def healthz():
                return jsonify(ok=True)

            return app
        """,
    "wsgi.py": """\
        from shop.app import create_app

        app = create_app()
        """,
    "tests/__init__.py": "",
    "tests/test_hooks.py": """\
        import hashlib
        import hmac
        import json

        import pytest
        from sqlalchemy import func, select

        from shop.app import create_app
        from shop.db import sessions
        from shop.models import Base, Fulfillment

        SECRET = "test-secret"


        @pytest.fixture
        def shop(tmp_path):
            url = f"sqlite:///{tmp_path / 'shop.db'}"
            Base.metadata.create_all(sessions(url).kw["bind"])
            return create_app(url, SECRET).test_client(), sessions(url)


        def deliver(client, event):
            body = json.dumps(event).encode()
            signature = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
            return client.post("/webhooks/orders", data=body, headers={"X-Hub-Signature-256": signature})


        def test_a_paid_order_is_fulfilled_once(shop):
            client, make_session = shop
            event = {"id": "evt_1", "type": "order.paid", "data": {"order_id": "o1", "amount_cents": 1200}}
            assert deliver(client, event).status_code == 200
            with make_session() as session:
                assert session.scalar(select(func.count()).select_from(Fulfillment)) == 1


        def test_an_unsigned_delivery_is_refused(shop):
            client, _ = shop
            assert client.post("/webhooks/orders", data=b"{}").status_code == 401


        def test_other_events_are_ignored(shop):
            client, make_session = shop
            assert deliver(client, {"id": "evt_2", "type": "order.created", "data": {}}).status_code == 200
            with make_session() as session:
                assert session.scalar(select(func.count()).select_from(Fulfillment)) == 0
        """,
    "pyproject.toml": """\
        [project]
        name = "shop"
        version = "0.1.0"
        dependencies = ["flask", "sqlalchemy", "gunicorn"]

        [tool.pytest.ini_options]
        testpaths = ["tests"]
        addopts = "-q"
        """,
    ".gitignore": "__pycache__/\nout/\n",
}

TARGET_SQLITE = """\
apiVersion: acklab/v1
kind: target
name: shop
endpoint: http://127.0.0.1:{{port}}/webhooks/orders
signing: {scheme: github, secret: env:SHOP_WEBHOOK_SECRET}
event:
  id: "{{event_id}}"
  type: order.paid
  data: {order_id: "{{order_id}}", amount_cents: "{{amount_cents}}"}
conflict: {set: {data.amount_cents: 9900}}
command:
  argv: [python, -m, gunicorn, --workers, "1", --threads, "4", --bind, "127.0.0.1:{{port}}", "wsgi:app"]
  env: {SHOP_DATABASE_URL: "sqlite:///{{scratch}}/shop.db", SHOP_WEBHOOK_SECRET: env:SHOP_WEBHOOK_SECRET}
  ready: {url: "http://127.0.0.1:{{port}}/healthz", status: [200]}
setup: {argv: [python, -m, shop.migrate]}
effects:
  sql: {url: "sqlite:///{{scratch}}/shop.db", count: "SELECT count(*) FROM fulfillments WHERE event_id = :event_id"}
expect: {max_effects: 1, conflict_status: [409, 422]}
"""

TARGET_POSTGRES = TARGET_SQLITE.replace("sqlite:///{{scratch}}/shop.db", "{{database_url}}").replace(
    "effects:\n", "database: {url: env:SHOP_TEST_DB_URL}\neffects:\n"
)


def git(directory: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(directory), *args], capture_output=True, text=True, check=True)
    return done.stdout.strip()


def make_flask_shop(directory: Path, *, postgres: bool = False) -> Path:
    """Write the shop into `directory` and commit it (branch main); the directory."""
    directory.mkdir(parents=True, exist_ok=True)
    files = {
        **FILES,
        "shop/hooks.py": HOOKS,
        "shop.target.yaml": TARGET_POSTGRES if postgres else TARGET_SQLITE,
    }
    for name, text in files.items():
        path = directory / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text) if name not in ("shop/hooks.py",) else text)
    git(directory, "init", "-q", "-b", "main")
    git(directory, "config", "user.email", "maintainer@shop.example")
    git(directory, "config", "user.name", "Shop Maintainer")
    git(directory, "add", "-A")
    git(directory, "commit", "-q", "-m", "shop: fulfil paid orders")
    return directory


def repair_diff(directory: Path) -> str:
    """The unified diff that turns the shop's hooks.py into `REPAIRED` (as git writes it)."""
    path = directory / "shop/hooks.py"
    original = path.read_text()
    try:
        path.write_text(REPAIRED)
        return git(directory, "diff", "--", "shop/hooks.py") + "\n"
    finally:
        path.write_text(original)
