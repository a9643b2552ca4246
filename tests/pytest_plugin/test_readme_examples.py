"""The README's "Test your handler with pytest" examples, pasted as they are into a user's suite.

Each example imports a ``shop`` package as a user's project would have one; the package is
written here (a receipt-based handler), the example is taken from the README verbatim.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.pytest_plugin.conftest import FAST

README = Path(__file__).resolve().parents[2] / "README.md"
PYTEST_DOC = README.parent / "docs" / "pytest.md"

FASTAPI_SHOP = {
    "shop/__init__.py": "",
    "shop/settings.py": 'WEBHOOK_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"\n',
    "shop/models.py": """
from sqlalchemy import String
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class Base(DeclarativeBase):
    pass


class Receipt(Base):
    __tablename__ = "receipts"
    event_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    body_sha256: Mapped[str] = mapped_column(String(64))


class Fulfillment(Base):
    __tablename__ = "fulfillments"
    id: Mapped[int] = mapped_column(primary_key=True)
    event_id: Mapped[str] = mapped_column(String(64))
""",
    "shop/main.py": """
import hashlib

from fastapi import FastAPI, HTTPException, Request
from sqlalchemy import create_engine
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

from shop.models import Base, Fulfillment, Receipt
from shop.settings import WEBHOOK_SECRET


def create_app(database_url):
    engine = create_engine(database_url, connect_args={"timeout": 30})
    Base.metadata.create_all(engine)
    app = FastAPI()
    app.state.engine = engine

    @app.post("/webhooks/orders")
    async def orders(request: Request):
        body = await request.body()
        try:
            event = Webhook(WEBHOOK_SECRET).verify(body, dict(request.headers))
        except WebhookVerificationError:
            raise HTTPException(401)
        digest = hashlib.sha256(body).hexdigest()
        try:
            with Session(engine) as session, session.begin():
                session.add(Receipt(event_id=event["id"], body_sha256=digest))
                session.flush()
                session.add(Fulfillment(event_id=event["id"]))
        except IntegrityError:
            with Session(engine) as session:
                if session.get(Receipt, event["id"]).body_sha256 != digest:
                    raise HTTPException(409, "event id reused for another body")
            return {"status": "duplicate"}
        return {"status": "fulfilled"}

    return app
""",
}

FLASK_SHOP = {
    "shop/__init__.py": """
import sqlite3

from flask import Flask, abort, request
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError


def create_app(test_config):
    app = Flask(__name__)
    app.config.update(test_config)
    with sqlite3.connect(app.config["DATABASE"]) as db:
        db.execute("CREATE TABLE IF NOT EXISTS receipts (event_id TEXT PRIMARY KEY, body TEXT)")
        db.execute("CREATE TABLE IF NOT EXISTS fulfillments (event_id TEXT)")

    @app.post("/webhooks/orders")
    def orders():
        body = request.get_data(as_text=True)
        try:
            event = Webhook(app.config["WEBHOOK_SECRET"]).verify(body, dict(request.headers))
        except WebhookVerificationError:
            abort(401)
        try:
            with sqlite3.connect(app.config["DATABASE"], timeout=30) as db:
                db.execute("INSERT INTO receipts VALUES (?, ?)", (event["id"], body))
                db.execute("INSERT INTO fulfillments VALUES (?)", (event["id"],))
        except sqlite3.IntegrityError:
            with sqlite3.connect(app.config["DATABASE"]) as db:
                (stored,) = db.execute("SELECT body FROM receipts WHERE event_id = ?", (event["id"],)).fetchone()
            if stored != body:
                abort(409)
            return {"status": "duplicate"}
        return {"status": "fulfilled"}

    return app
""",
}


def section(doc: Path, heading: str) -> str:
    return doc.read_text().split(f"\n{heading}\n", 1)[1].split("\n## ", 1)[0]


def examples() -> list[str]:
    """The README's FastAPI example, then docs/pytest.md's Flask one (the README links it)."""
    found = []
    for doc, heading in ((README, "## Test your handler with pytest"), (PYTEST_DOC, "## A Flask app")):
        found += re.findall(
            r"```python\n(# tests/test_webhooks\.py\n.*?)```", section(doc, heading), flags=re.DOTALL
        )
    return found


def test_the_readme_has_both_examples():
    found = examples()
    assert len(found) == 2
    assert "from shop.main import create_app" in found[0]
    assert "from shop import create_app" in found[1]


@pytest.mark.parametrize(("index", "shop"), [(0, FASTAPI_SHOP), (1, FLASK_SHOP)], ids=["fastapi", "flask"])
def test_a_readme_example_runs_as_pasted(pytester, index, shop):
    pytester.makepyfile(**{name.removesuffix(".py"): source for name, source in shop.items()})
    pytester.makepyfile(test_webhooks=examples()[index])
    result = pytester.runpytest(*FAST)
    result.assert_outcomes(passed=1)
    # Each test had a database of its own: nothing was written into the project's folder.
    assert not list(pytester.path.glob("*.db"))
