"""Trial records for verdict tests: write only what a test is about, the rest filled in."""

from __future__ import annotations

from typing import Any

from acklab.evidence.documents.trial import Trial

AT = "2026-01-01T00:00:00Z"
DELIVERY = {
    "attempt": 1,
    "fault": "none",
    "sent_at": AT,
    "latency_ms": 1.0,
    "status": None,
    "sender_status": None,
    "error": None,
    "headers": {},
    "body_sha256": "0" * 64,
}
OBSERVATION = {"at": AT, "source": "sql", "after_seq": None}


def trial_of(record: dict[str, Any]) -> Trial:
    """A full, valid trial record around the parts `record` gives (deliveries, observations, ...)."""
    doc: dict[str, Any] = {
        "schema": "acklab/trial/v1",
        "run_id": "r",
        "trial_id": "t-0000",
        "target": "fixture:live",
        "experiment": "lost-ack",
        "index": 0,
        "seed": 7,
        "event_ids": ["evt_1"],
        "started_at": AT,
        "ended_at": AT,
        "duration_ms": 1.0,
        "verdict": "pass",
        "violations": [],
        "error": None,
        **record,
    }
    doc["deliveries"] = [DELIVERY | {"sender_status": d.get("status")} | d for d in doc.get("deliveries", [])]
    doc["observations"] = [OBSERVATION | o for o in doc.get("observations", [])]
    return Trial.read(doc)
