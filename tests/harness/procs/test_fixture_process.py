"""The fixture as its own process: it starts, the crash hook kills it after commit, it restarts."""

from __future__ import annotations

import json
import uuid

import httpx
import pytest
from sqlalchemy import create_engine, text

from acklab.app.schemes import sign
from acklab.evidence.journal import Journal
from acklab.harness.procs.fixture_process import FixtureProcess
from acklab.harness.procs.leases import LeaseBook

SECRET = "whsec_" + "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"


def order_paid(event_id: str) -> bytes:
    body = {
        "id": event_id,
        "type": "order.paid",
        "timestamp": "2026-01-01T00:00:00Z",
        "data": {"order_id": f"o-{event_id}", "amount_cents": 1200, "currency": "EUR"},
    }
    return json.dumps(body).encode()


def post(url: str, event_id: str) -> httpx.Response:
    body = order_paid(event_id)
    headers = {"Content-Type": "application/json", **sign("standard", SECRET, event_id, body)}
    return httpx.post(f"{url}/webhooks/orders", content=body, headers=headers, timeout=10, trust_env=False)


def effects(url: str, event_id: str) -> int:
    with create_engine(url).connect() as conn:
        return conn.execute(
            text("SELECT count(*) FROM fulfillments WHERE event_id = :e"), {"e": event_id}
        ).scalar_one()


@pytest.mark.slow
@pytest.mark.parametrize(("handler", "after_retry"), [("live", 1), ("unsafe", 2)])
def test_crash_after_commit_then_a_retry(tmp_path, handler, after_retry):
    db = f"sqlite:///{tmp_path / 'fixture.db'}"
    with Journal(tmp_path / "journal.sqlite") as journal:
        leases = LeaseBook(journal, "run-1")
        with FixtureProcess(
            handler=handler, database_url=db, secret=SECRET, leases=leases, log_dir=tmp_path
        ) as fixture:
            fixture.start(crash_after_commit=True)
            port = fixture.port
            event_id = f"evt_{uuid.uuid4().hex[:10]}"
            with pytest.raises(httpx.RemoteProtocolError):
                post(fixture.url, event_id)
            assert fixture.wait_exit(10) == -9
            assert effects(db, event_id) == 1  # committed before the kill
            fixture.start()
            assert fixture.port == port
            assert post(fixture.url, event_id).status_code == 200
            assert effects(db, event_id) == after_retry
        kinds = [(e.kind, e.status) for e in journal.history("run-1")]
    assert kinds == [("lease", "acquired"), ("lease", "released")] * 2
