"""Serve test handlers over a real socket and describe them with target spec files."""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from acklab.harness.targets.server import ThreadedServer
from tests.harness.handlers import EFFECTS_QUERY, Variant, handler_app

SECRET = "whsec_" + base64.b64encode(b"acklab-test-secret-0123456789ab").decode()
SECRET_ENV = "ACKLAB_TEST_WEBHOOK_SECRET"


def target_doc(name: str, endpoint: str, db_url: str, *, timeout_s: float = 2.0) -> dict[str, Any]:
    return {
        "apiVersion": "acklab/v1",
        "kind": "target",
        "name": name,
        "endpoint": endpoint,
        "signing": {"scheme": "standard", "secret": f"env:{SECRET_ENV}"},
        "delivery": {"timeout_s": timeout_s},
        "event": {
            "id": "{{event_id}}",
            "type": "order.paid",
            "data": {"order_id": "{{order_id}}", "amount_cents": 1200},
        },
        "conflict": {"set": {"data.amount_cents": 9900}},
        "effects": {"sql": {"url": db_url, "count": EFFECTS_QUERY}},
        "expect": {"max_effects": 1, "conflict_status": [409, 422]},
    }


def write_spec(path: Path, doc: dict[str, object]) -> Path:
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


ServeHandler = Callable[..., Path]


@pytest.fixture
def serve_handler(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ServeHandler]:
    """`serve_handler(variant, name=..., db_url=None, timeout_s=2.0)` -> the path of its target spec."""
    monkeypatch.setenv(SECRET_ENV, SECRET)
    servers: list[ThreadedServer] = []

    def start(
        variant: Variant, *, name: str = "handler", db_url: str | None = None, timeout_s: float = 2.0
    ) -> Path:
        db_url = db_url or f"sqlite:///{tmp_path / name}.db"
        server = ThreadedServer(handler_app(variant, db_url, SECRET)).start()
        servers.append(server)
        doc = target_doc(name, f"{server.url}/hooks", db_url, timeout_s=timeout_s)
        return write_spec(tmp_path / f"{name}.yaml", doc)

    yield start
    for server in servers:
        server.stop()
