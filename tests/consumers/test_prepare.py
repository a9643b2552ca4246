"""``prepare:``: a shop that acts only on orders it created (`tests.consumers.prepared_orders`) is
attacked on orders the lab made first — through the shop's own API, or by SQL — and without
``prepare:`` its events change nothing, which the run says instead of passing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.consumers import scenarios
from tests.consumers.scenarios import ROOT, STANDARD_EVENT, module, sqlite_url, target_spec, write

pytestmark = pytest.mark.slow

PREPARE = {
    "request": {
        "method": "POST",
        "url": "http://127.0.0.1:{{port}}/api/orders",
        "body": {"code": "{{order_id}}", "total_cents": 1200},
        "ok_status": [201],
    },
    "sql": "INSERT INTO orders (code, status) VALUES (:order_id, 'pending')",
}


def spec(tmp: Path, prepare: dict[str, Any] | None) -> Path:
    db = tmp / "orders.sqlite"
    doc = target_spec(
        "prepared-orders",
        "http://127.0.0.1:{{port}}/hooks",
        signing={"scheme": "standard", "secret": "env:ACKLAB_TEST_WEBHOOK_SECRET"},
        event=STANDARD_EVENT,
        effects={
            "sql": {
                "url": sqlite_url(db),
                "count": "SELECT count(*) FROM fulfillments WHERE event_id = :event_id",
            }
        },
        command={
            "argv": module("prepared_orders", "--port", "{{port}}", "--db", str(db)),
            "env": {"PYTHONPATH": str(ROOT)},
            "cwd": str(ROOT),
            "ready": {"url": "http://127.0.0.1:{{port}}/health", "status": [200]},
        },
    )
    if prepare is not None:
        doc["prepare"] = prepare
    return write(tmp / "orders.yaml", doc)


@pytest.mark.parametrize("how", ["request", "sql"])
def test_the_lab_makes_each_events_order_first(tmp_path, how):
    scenario = scenarios.Scenario(
        "prepared", spec(tmp_path, {how: PREPARE[how]}), ("lost-ack",), {"lost-ack": "pass"}
    )
    result = scenario.run(tmp_path / "out", trials=2)
    assert scenario.mismatches(result) == []
    assert result.exit_code == 0, result.explain()


def test_without_prepare_the_shop_ignores_every_event_and_the_run_does_not_pass(tmp_path):
    scenario = scenarios.Scenario("unprepared", spec(tmp_path, None), ("lost-ack",), {"lost-ack": "fail"})
    result = scenario.run(tmp_path / "out", trials=1)
    assert not result.passed
    assert "acked-exactly-once" in result.explain()  # acknowledged, and not one effect
