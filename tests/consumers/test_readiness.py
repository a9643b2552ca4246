"""Readiness a service can express (docs/targets.md). A service whose health URL answers before its
webhook routes exist is not ready while the lab's signed probe delivery gets 404 (no 404 blamed on
signing), and ``ready`` may be a request (method, url, body, status)."""

from __future__ import annotations

import pytest

from acklab.harness.errors import TargetUnreachable
from tests.consumers import scenarios

pytestmark = pytest.mark.slow


def test_routes_that_appear_after_the_health_url_are_waited_for_with_a_request_shaped_ready(tmp_path):
    ready = {"method": "POST", "body": '{"query": "{ ready }"}', "status": [200]}
    scenario = scenarios.late_routes(tmp_path, ready=ready)
    result = scenario.run(tmp_path / "out")
    assert scenario.mismatches(result) == []
    assert result.exit_code == 0
    # Without the route check the first deliveries get "Cannot POST /hooks" and the trial errs.
    (tmp_path / "blind").mkdir()
    blind = scenarios.late_routes(tmp_path / "blind", ready={**ready, "routes": False})
    outcome = blind.run(tmp_path / "out-blind")
    (entry,) = outcome.run["experiments"]
    assert entry["verdict"] == "error"
    assert "404" in entry["error"]
    assert "is the route there yet" in entry["error"]


def test_a_path_that_answers_404_is_said_at_once_and_named_when_the_wait_ends(tmp_path, capfd):
    # Routes that never come within the wait: as a wrong path looks to the lab.
    scenario = scenarios.late_routes(tmp_path, ready={"status": [200]}, routes_after_s=120)
    spec = scenario.spec.read_text().replace("ready_timeout_s: 30", "ready_timeout_s: 4")
    scenario.spec.write_text(spec)
    with pytest.raises(TargetUnreachable) as refused:
        scenario.run(tmp_path / "out")
    said = capfd.readouterr().err
    assert "the service is up (GET http://127.0.0.1:" in said
    assert "answered 404 (no route yet)): nothing at /hooks yet" in said
    assert "if /hooks is not the webhook's path, fix the spec's endpoint" in said
    assert "Is /hooks the webhook's path" in str(refused.value)
    assert "raise ready_timeout_s," not in str(refused.value)
