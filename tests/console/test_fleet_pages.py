"""Beyond one process in the console: which replica answered each delivery, the restart on the
trial's timeline, the consumer's clock beside the lab's — from a real run of replicas."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from acklab.console.fleet import moments_of
from acklab.evidence.documents.trial import Trial
from tests.consumers import fleet_scenarios
from tests.consumers.scenarios import SECRETS


@pytest.mark.slow
@pytest.mark.faketime
def test_the_incident_page_shows_replicas_restarts_and_both_clocks(
    tmp_path: Path, client_for: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in SECRETS.items():
        monkeypatch.setenv(key, value)
    chosen = ("restart-redelivery", "late-redelivery")
    scenario = fleet_scenarios.fleet_orders(
        tmp_path, "lru", chosen, dict.fromkeys(chosen, "fail"), replicas=2
    )
    result = scenario.run(tmp_path / "out")
    assert scenario.mismatches(result) == []
    client = client_for(tmp_path / "out")
    pages = {}
    for path in (result.bundle / "incidents").glob("*.json"):
        incident = json.loads(path.read_text())
        pages[incident["experiment"]["name"]] = client.get(
            f"/bundles/{result.bundle.name}/incidents/{incident['incident_id']}"
        ).text
    assert set(pages) == set(chosen)
    restart, late = pages["restart-redelivery"], pages["late-redelivery"]
    # Round-robin: the original reached replica 0, the retry replica 1.
    assert "replica 0" in restart
    assert "replica 1" in restart
    assert "Restarts and the consumer's clock" in restart
    assert "the consumer was stopped and started again" in restart
    assert "the consumer&#39;s clock" in late
    assert "(3 days ahead)" in late


def test_moments_leave_out_what_the_lab_never_writes() -> None:
    trial = Trial.model_construct(
        parameters={
            "restarts": [
                {"at_unix": 1_700_000_000, "pids_before": [1, 2], "pids_after": [3, None], "took_ms": 812.5},
                {"at_unix": "yesterday"},
                "<script>",
            ],
            "clock_shifts": [
                {"clock": {"lab_unix": 1_700_000_100, "consumer_unix": 1_700_259_300, "offset_s": 259_200}},
                {"clock": {"lab_unix": 1e300}},
                {"clock": "not a clock"},
            ],
        }
    )
    moments = moments_of(trial)
    assert [m.kind for m in moments] == ["restart", "clock"]
    assert moments[0].text.endswith("in 812 ms: processes 1, 2 → 3, —")
    assert moments[1].text.endswith("the consumer's clock 2023-11-17 22:15:00 UTC (3 days ahead)")
