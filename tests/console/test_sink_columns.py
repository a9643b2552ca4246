"""Effects outside the database in the console: a heatmap column per source, counts in the timeline."""

from __future__ import annotations

from acklab.console.overview import _main_and_older
from acklab.console.scan import IncidentSummary
from acklab.console.timeline import sinks_after
from acklab.evidence.documents.records import Observation


def _incident(
    experiment: str, verdict: str, sinks: tuple[tuple[str, int], ...], run: str = "r1"
) -> IncidentSummary:
    return IncidentSummary(
        bundle=run, incident_id=f"{experiment}-1", path=None, run_id=run, created_at="", sort_time=1.0,
        target="shop", experiment=experiment, seed=1, verdict=verdict, trials=1, passed=int(verdict == "pass"),
        failed=int(verdict == "fail"), errors=0, violations=sum(n for _, n in sinks), sinks=sinks,
    )  # fmt: skip


def test_a_column_per_source_shows_the_worst_experiment_for_it():
    main, _ = _main_and_older(
        [
            _incident("lost-ack", "fail", (("emails", 1), ("calls", 0))),
            _incident("concurrent-duplicates", "pass", (("emails", 0), ("calls", 0))),
            _incident("replay", "pass", ()),
        ]
    )
    assert main.experiments == ["lost-ack", "concurrent-duplicates", "replay", "emails", "calls"]
    (row,) = main.rows
    emails, calls = main.by_row[row, "emails"], main.by_row[row, "calls"]
    assert (emails.verdict, emails.violations, emails.incident_id) == ("fail", 1, "lost-ack-1")
    assert (calls.verdict, calls.violations) == ("pass", 0)


def test_a_target_without_sinks_gets_no_source_columns():
    main, _ = _main_and_older([_incident("lost-ack", "pass", ())])
    assert main.experiments == ["lost-ack"]


def test_the_timeline_shows_what_the_sinks_had_after_each_delivery():
    seen = [
        Observation(
            at="2026-01-01T00:00:00Z", event_id="e", effects=1, source="sql", after_seq=0, emails=2, calls=1
        ),
        Observation(at="2026-01-01T00:00:00Z", event_id="e", effects=1, source="sql", after_seq=1),
    ]
    assert sinks_after(seen, "e", 0) == "2 emails \u00b7 1 call"
    assert sinks_after(seen, "e", 1) is None


def test_each_events_effects_land_on_its_own_deliverys_row():
    from acklab.console.timeline import rows_of
    from acklab.evidence.documents.trial import Trial

    at = "2026-01-01T00:00:00Z"

    def delivery(seq: int, event_id: str) -> dict[str, object]:
        return {"seq": seq, "event_id": event_id, "attempt": 1, "kind": "original", "fault": "none",
                "sent_at": at, "latency_ms": 5.0, "status": 200, "sender_status": 200, "error": None,
                "headers": {}, "body_sha256": "0" * 64, "response_excerpt": None}  # fmt: skip

    def read(event_id: str, after: int | None, effects: int, emails: int) -> dict[str, object]:
        return {"at": at, "event_id": event_id, "effects": effects, "source": "sql", "after_seq": after,
                "emails": emails}  # fmt: skip

    # Two events sent one after the other, both read once after the last delivery (seq 1).
    trial = Trial.read(
        {
            "schema": "acklab/trial/v1", "run_id": "r", "trial_id": "sibling-events-0", "target": "shop",
            "experiment": "sibling-events", "index": 0, "seed": 1, "event_ids": ["evt_a", "evt_b"],
            "started_at": at, "ended_at": at, "duration_ms": 10.0, "verdict": "pass",
            "deliveries": [delivery(0, "evt_a"), delivery(1, "evt_b")],
            "observations": [read("evt_a", None, 0, 0), read("evt_b", None, 0, 0), read("evt_a", 1, 1, 1),
                             read("evt_b", 1, 1, 0)],
            "violations": [], "error": None,
        }
    )  # fmt: skip
    first, second = rows_of(trial)
    assert (first.event_id, first.effects_before, first.effects_after, first.count_after("emails")) == (
        "evt_a",
        0,
        1,
        1,
    )
    assert (second.event_id, second.effects_before, second.effects_after, second.count_after("emails")) == (
        "evt_b",
        0,
        1,
        0,
    )
