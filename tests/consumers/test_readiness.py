"""Readiness a service can express (docs/targets.md). A service whose health URL answers before its
webhook routes exist is not ready while the lab's signed probe delivery gets 404 (no 404 blamed on
signing), and ``ready`` may be a request (method, url, body, status)."""

from __future__ import annotations

import pytest

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
