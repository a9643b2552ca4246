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
