"""Acknowledgement as the sender saw it (docs/acknowledgement.md), and a handler that hangs is the handler's failure.

The consumers are FastAPI services over sqlite3 (`tests.consumers.async_orders`), each started as a
process of its own. One run each here; the 20/20 figures are a loop over the same scenarios.
"""

from __future__ import annotations

import json
import time

import pytest

from acklab.harness.core.plan import RunSettings
from acklab.harness.errors import ProbeError
from acklab.harness.ports import free_port
from tests.consumers import scenarios
from tests.consumers.scenarios import Scenario

pytestmark = pytest.mark.slow


def violations(result, experiment: str) -> list[dict]:
    return next(e for e in result.run["experiments"] if e["name"] == experiment)["violations"]


def once(scenario: Scenario, out):
    with scenario.started():
        result = scenario.run(out)
    assert scenario.mismatches(result) == [], scenario.name
    return result


def test_a_consumer_that_answers_every_duplicate_500_fails_lost_ack(tmp_path):
    result = once(scenarios.async_orders(tmp_path, "duplicate-500", ("lost-ack",), "fail"), tmp_path / "out")
    assert result.exit_code == 1
    (violation,) = violations(result, "lost-ack")
    assert violation["invariant"] == "eventually-acknowledged"
    # The sender's view: the lost acknowledgement, then the duplicates' own answers.
    assert violation["observed"].startswith("504, 500")
    assert "a duplicate of a processed event must be answered 2xx" in violation["detail"]


def test_blocking_sqlite_in_an_async_handler_hangs_under_a_burst_and_fails_its_twin_passes(tmp_path):
    settings = RunSettings(handler_timeout_s=2.0, burst=8, max_attempts=2)
    blocking = scenarios.async_orders(
        tmp_path, "blocking", ("concurrent-duplicates",), "fail", settings=settings
    )
    result = once(blocking, tmp_path / "out")
    assert result.exit_code == 1  # the handler's failure, not the lab's (4)
    found = violations(result, "concurrent-duplicates")
    assert {v["invariant"] for v in found} == {"eventually-acknowledged"}
    assert "did not answer within the sender's timeout of 2 s" in found[0]["detail"]
    twin = scenarios.async_orders(tmp_path, "thread", ("concurrent-duplicates",), "pass", settings=settings)
    assert once(twin, tmp_path / "out2").exit_code == 0


def test_a_handler_that_never_answers_fails_within_the_handler_timeout_per_delivery(tmp_path):
    # The provider would wait 15 s; --handler-timeout 2 bounds each delivery's answer exactly.
    settings = RunSettings(handler_timeout_s=2.0, max_attempts=1)
    scenario = scenarios.async_orders(
        tmp_path, "never-answers", ("lost-ack",), "fail", settings=settings, timeout_s=15.0
    )
    started = time.monotonic()
    result = once(scenario, tmp_path / "out")
    elapsed = time.monotonic() - started
    assert result.exit_code == 1
    (trial,) = [json.loads(p.read_text()) for p in (result.bundle / "trials").glob("lost-ack-*.json")]
    deliveries = trial["deliveries"]
    # 2 s, not the provider's 15: the upper bound leaves a loaded machine's timer lag room (a
    # starved event loop fires the timeout late) and still tells the two timeouts apart.
    assert all(d["status"] is None and 1900 <= d["latency_ms"] <= 6000 for d in deliveries), deliveries
    assert elapsed < 6 * len(deliveries) + 15  # the deliveries, then the lab's reads and the service
    (violation,) = {v["invariant"] for v in trial["violations"]}
    assert violation == "eventually-acknowledged"


def test_an_effects_probe_that_is_down_while_the_handler_answers_is_the_labs_failure(tmp_path):
    dead = free_port()
    probe = {"http": {"url": f"http://127.0.0.1:{dead}/effects/{{{{event_id}}}}", "json_path": "count"}}
    scenario = scenarios.async_orders(tmp_path, "thread", ("lost-ack",), "error", effects=probe)
    with scenario.started(), pytest.raises(ProbeError) as refused:
        scenario.run(tmp_path / "out")
    assert refused.value.exit_code == 4
    assert f"127.0.0.1:{dead}" in str(refused.value)
