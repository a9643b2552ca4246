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


def commit_all(directory: Path, author: str, message: str) -> Path:
    """`directory` made a repository (branch main) with every file committed by `author` ("Name <email>")."""
    name, _, email = author.partition(" <")
    git(directory, "init", "-q", "-b", "main")
    git(directory, "config", "user.email", email.rstrip(">"))
    git(directory, "config", "user.name", name)
    git(directory, "add", "-A")
    git(directory, "commit", "-q", "-m", message)
    return directory


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
    return commit_all(directory, "Shop Maintainer <maintainer@shop.example>", "shop: fulfil paid orders")


def repair_diff(directory: Path) -> str:
    """The unified diff that turns the shop's hooks.py into `REPAIRED` (as git writes it)."""
    path = directory / "shop/hooks.py"
    original = path.read_text()
    try:
        path.write_text(REPAIRED)
        return git(directory, "diff", "--", "shop/hooks.py") + "\n"
    finally:
        path.write_text(original)


# -- a Starlette service with a conflicting-payload bug ----------------------------------------

LEDGER_SECRET = "whsec_" + "c2hvcC1sZWRnZXItc2lnbmluZy1zZWNyZXQtMDEyMzQ1Njc4OQ=="

LEDGER_HOOKS = '''\
"""Book a payment the provider reports, once per event id."""

from __future__ import annotations

import hashlib
import json

from sqlalchemy import delete, insert, select
from sqlalchemy.engine import Connection

from ledger.tables import events, payments


def digest(event: dict) -> str:
    return hashlib.sha256(json.dumps(event, sort_keys=True).encode()).hexdigest()


def book(conn: Connection, event: dict) -> tuple[int, dict]:
    """(HTTP status, answer) for one payment.succeeded event."""
    seen = conn.execute(select(events.c.digest).where(events.c.event_id == event["id"])).scalar()
    if seen == digest(event):
        return 200, {"duplicate": event["id"]}
    # A reused id with another body is booked as the payment it now describes.
    conn.execute(
        insert(payments).values(
            event_id=event["id"], invoice_id=event["data"]["invoice_id"], amount_cents=event["data"]["amount_cents"]
        )
    )
    conn.execute(delete(events).where(events.c.event_id == event["id"]))
    conn.execute(insert(events).values(event_id=event["id"], digest=digest(event)))
    return 200, {"booked": event["data"]["invoice_id"]}
'''

LEDGER_FILES = {
    "ledger/__init__.py": "",
    "ledger/tables.py": """\
        from sqlalchemy import Column, Integer, MetaData, String, Table

        metadata = MetaData()
        payments = Table(
            "payments",
            metadata,
            Column("id", Integer, primary_key=True, autoincrement=True),
            Column("event_id", String(128), nullable=False),
            Column("invoice_id", String(64), nullable=False),
            Column("amount_cents", Integer, nullable=False),
        )
        events = Table("events", metadata, Column("event_id", String(128), primary_key=True), Column("digest", String(64)))
        """,
    "ledger/migrate.py": """\
        import os

        from sqlalchemy import create_engine

        from ledger.tables import metadata

        if __name__ == "__main__":
            metadata.create_all(create_engine(os.environ["LEDGER_DB"]))
        """,
    "ledger/app.py": """\
        import json
        import os

        from sqlalchemy import create_engine
        from standardwebhooks import Webhook
        from standardwebhooks.webhooks import WebhookVerificationError
        from starlette.applications import Starlette
        from starlette.requests import Request
        from starlette.responses import JSONResponse
        from starlette.routing import Route

        from ledger import webhooks


        def create_app(url: str | None = None, secret: str | None = None) -> Starlette:
            engine = create_engine(url or os.environ["LEDGER_DB"], connect_args={"timeout": 30})
            verifier = Webhook(secret or os.environ["LEDGER_WEBHOOK_SECRET"])

            async def payments(request: Request) -> JSONResponse:
                body = await request.body()
                try:
                    verifier.verify(body, dict(request.headers))
                except WebhookVerificationError:
                    return JSONResponse({"error": "bad signature"}, status_code=401)
                with engine.begin() as conn:
                    status, answer = webhooks.book(conn, json.loads(body))
                return JSONResponse(answer, status_code=status)

            async def health(request: Request) -> JSONResponse:
                return JSONResponse({"ok": True})

            return Starlette(routes=[Route("/hooks/payments", payments, methods=["POST"]), Route("/health", health)])


        app = create_app() if "LEDGER_DB" in os.environ else None
        """,
    "tests/__init__.py": "",
    "tests/test_book.py": """\
        from sqlalchemy import create_engine, func, select

        from ledger.tables import metadata, payments
        from ledger.webhooks import book


        def test_a_payment_is_booked_once(tmp_path):
            engine = create_engine(f"sqlite:///{tmp_path / 'ledger.db'}")
            metadata.create_all(engine)
            event = {"id": "evt_1", "type": "payment.succeeded", "data": {"invoice_id": "in_1", "amount_cents": 500}}
            with engine.begin() as conn:
                assert book(conn, event)[0] == 200
                assert book(conn, event) == (200, {"duplicate": "evt_1"})
                assert conn.execute(select(func.count()).select_from(payments)).scalar() == 1
        """,
    "pytest.ini": "[pytest]\ntestpaths = tests\n",
    ".gitignore": "__pycache__/\nout/\n",
    "ledger.target.yaml": """\
        apiVersion: acklab/v1
        kind: target
        name: ledger
        endpoint: http://127.0.0.1:{{port}}/hooks/payments
        signing: {scheme: standard, secret: env:LEDGER_WEBHOOK_SECRET}
        event:
          id: "{{event_id}}"
          type: payment.succeeded
          data: {invoice_id: "{{order_id}}", amount_cents: "{{amount_cents}}"}
        conflict: {set: {data.amount_cents: 9900}}
        command:
          argv: [python, -m, uvicorn, --host, 127.0.0.1, --port, "{{port}}", --log-level, warning, "ledger.app:app"]
          env: {LEDGER_DB: "sqlite:///{{scratch}}/ledger.db", LEDGER_WEBHOOK_SECRET: env:LEDGER_WEBHOOK_SECRET}
          ready: {url: "http://127.0.0.1:{{port}}/health", status: [200]}
        setup: {argv: [python, -m, ledger.migrate]}
        effects:
          sql: {url: "sqlite:///{{scratch}}/ledger.db", count: "SELECT count(*) FROM payments WHERE event_id = :event_id"}
        expect: {max_effects: 1, conflict_status: [409, 422]}
        """,
}


def make_starlette_ledger(directory: Path) -> Path:
    """Write the ledger (Starlette + uvicorn, Standard Webhooks) into `directory` and commit it."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in {**LEDGER_FILES, "ledger/webhooks.py": LEDGER_HOOKS}.items():
        path = directory / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text if name == "ledger/webhooks.py" else textwrap.dedent(text))
    return commit_all(directory, "Ledger Maintainer <maintainer@ledger.example>", "ledger: book payments")
