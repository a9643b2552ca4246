"""Behind a queue in the console: each job's life beside the deliveries it came from — from a real
run of Celery on the lab's Redis, and from records the lab would never write."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from acklab.console.jobs import job_rows
from acklab.evidence.documents.records import JobStep
from acklab.evidence.documents.trial import Trial
from tests.consumers import queue_scenarios
from tests.consumers.scenarios import SECRETS


@pytest.mark.slow
@pytest.mark.redis
def test_the_incident_page_shows_the_job_enqueued_taken_killed_and_handed_out_again(
    tmp_path: Path, client_for: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in SECRETS.items():
        monkeypatch.setenv(key, value)
    scenario = queue_scenarios.queued_orders(
        tmp_path,
        "celery",
        ("worker-crash-after-effect",),
        {"worker-crash-after-effect": "fail"},
        env=queue_scenarios.CRASH_WINDOW,
    )
    result = scenario.run(tmp_path / "out")
    assert scenario.mismatches(result) == []
    (path,) = (result.bundle / "incidents").glob("*.json")
    incident = json.loads(path.read_text())
    page = (
        client_for(tmp_path / "out")
        .get(f"/bundles/{result.bundle.name}/incidents/{incident['incident_id']}")
        .text
    )
    assert "The jobs behind these deliveries" in page
    section = page[page.index("The jobs behind these deliveries") :]
    for step in ("enqueued", "taken", "killed", "restarted", "requeued", "acknowledged"):
        assert f'<span class="tag">{step}</span>' in section, step
    assert "worker 1" in section
    assert "SIGKILL after the effect" in section


def test_each_step_follows_the_delivery_sent_last_before_it_and_is_bounded() -> None:
    deliveries = [
        {"seq": 0, "sent_at": "2026-12-06T07:00:00.000000Z"},
        {"seq": 1, "sent_at": "2026-12-06T07:00:05.000000Z"},
    ]
    trial = Trial.model_construct(
        deliveries=[type("D", (), d)() for d in deliveries],
        jobs=[
            JobStep(at="2026-12-06T07:00:00.500000Z", event_id="evt_1", step="enqueued", by="broker"),
            JobStep(
                at="2026-12-06T07:00:06.000000Z",
                event_id="evt_1",
                step="killed",
                by="lab",
                worker="worker 1",
                detail="<script>" * 100,
            ),
        ],
    )
    rows = job_rows(trial)
    assert [(r.after_seq, r.step, r.at) for r in rows] == [
        (0, "enqueued", "07:00:00.500"),
        (1, "killed", "07:00:06.000"),
    ]
    assert len(rows[1].detail) == 300  # the template escapes it; the console bounds it
