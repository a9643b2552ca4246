"""Realistic evidence bundles for the console's tests and benchmark, written with BundleWriter.

Every document validates against evidence/schemas (unless `validate=False`, which the
benchmark uses after the first bundle to keep 10,000 incidents fast to generate). The shapes
follow what the harness records: the unsafe fixture double-fulfils after a lost ack, a
timeout overlap and concurrent duplicates, accepts a conflicting payload and a stale replay;
the live fixture keeps every invariant.
"""

from __future__ import annotations

import random
import zlib
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from acklab.evidence.bundle import BundleWriter
from acklab.evidence.documents.incident import Incident
from acklab.evidence.documents.run import RunDocument
from acklab.evidence.reports.junit import experiments_junit
from tests.console.sample_docs import (
    BASE_TIME,
    XSS_ATTR,
    XSS_SCRIPT,
    ci_env,
    code_quality,
    make_trail,
    sast,
    ts,
)

__all__ = ["BASE_TIME", "XSS_ATTR", "XSS_SCRIPT", "make_evidence", "make_incident", "make_run_bundle"]

EXPERIMENTS = {
    "lost-ack": "the handler commits, the response is replaced by a synthetic 504, the sender retries",
    "timeout-overlap": "the sender times out while the handler still works, and retries into it",
    "concurrent-duplicates": "four identical deliveries released together",
    "conflicting-payload": "the same event id with a different body",
    "replay": "a stale and a tampered signed delivery after the original",
}
BOUNDARY = (
    "acklab proves at-most-once effects in this handler's own database under the faults listed; "
    "it does not prove exactly-once delivery across systems."
)


def slug(text: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in text.lower()).strip("-") or "x"


@dataclass
class Step:
    """One planned delivery and what each handler does with it."""

    kind: str
    fault: str
    unsafe_effects: int
    live_effects: int
    unsafe_status: int | None = 200
    live_status: int | None = 200
    sender_status: int | None = None  # None: same as the status
    error: str | None = None
    latency: float = 20.0
    # effects.smtp: the receipts each handler had sent for the event after this delivery
    unsafe_emails: int | None = None
    live_emails: int | None = None


def plan(experiment: str) -> list[Step]:
    """The deliveries of one trial of an experiment, with the effects count after each."""
    if experiment == "lost-ack":
        return [
            Step("original", "lost-ack", 1, 1, sender_status=504, latency=35),
            Step("retry", "none", 2, 1),
        ]
    if experiment == "timeout-overlap":
        return [
            Step("original", "timeout", 1, 1, None, None, error="sender timed out after 2.0 s", latency=2000),
            Step("retry", "none", 2, 1, latency=240),
        ]
    if experiment == "concurrent-duplicates":
        return [
            Step(
                "duplicate", "none", n, 1, live_status=200 if n == 1 else 409, unsafe_emails=k, live_emails=1
            )
            for k, n in enumerate((1, 2, 2, 3), 1)
        ]
    if experiment == "conflicting-payload":
        return [Step("original", "none", 1, 1), Step("conflict", "none", 2, 1, live_status=409)]
    return [
        Step("original", "none", 1, 1),
        Step("replay-stale", "none", 2, 1, live_status=401),
        Step("replay-tampered", "none", 2, 1, 401, 401),
    ]


def violation_for(experiment: str, event_id: str, observed: int, trial_id: str) -> dict[str, Any]:
    invariant = {"conflicting-payload": "conflict-rejected", "replay": "replay-rejected"}.get(
        experiment, "at-most-once-effect"
    )
    return {
        "invariant": invariant,
        "event_id": event_id,
        "observed": observed,
        "expected": "<= 1",
        "detail": f"{observed} fulfillments for one event after {experiment}",
        "trial": trial_id,
    }


def make_trial(
    *, run_id: str, target: str, experiment: str, index: int, seed: int, start: datetime, hostile: bool
) -> dict[str, Any]:
    """One trial record; the unsafe target violates, the live one does not."""
    unsafe = target.endswith("unsafe") or hostile
    rng = random.Random(zlib.crc32(f"{seed}:{experiment}:{index}:{target}".encode()))
    event_id = f"evt_{seed}_{slug(experiment)}_{index}"
    trial_id = f"{slug(experiment)}-{index}"
    deliveries: list[dict[str, Any]] = []
    observations: list[dict[str, Any]] = [
        {"at": ts(start), "event_id": event_id, "effects": 0, "source": "sql", "after_seq": None}
    ]
    confirmations = []
    moment = start
    for seq, step in enumerate(plan(experiment)):
        status = step.unsafe_status if unsafe else step.live_status
        effects = step.unsafe_effects if unsafe else step.live_effects
        latency = round(step.latency * rng.uniform(0.8, 1.3), 1)
        moment += timedelta(milliseconds=latency + 5)
        excerpt = '{"status": "fulfilled"}' if status == 200 else '{"detail": "already processed"}'
        delivery: dict[str, Any] = {
            "seq": seq,
            "event_id": event_id,
            "attempt": seq + 1,
            "kind": step.kind,
            "fault": step.fault,
            "sent_at": ts(moment),
            "latency_ms": latency,
            "status": status,
            "sender_status": step.sender_status if step.sender_status is not None else status,
            "error": step.error,
            "headers": {"content-type": "application/json", "webhook-id": event_id},
            "body_sha256": f"{zlib.crc32(event_id.encode()):08x}" * 8,
            "response_excerpt": excerpt if status is not None else None,
        }
        if hostile:
            delivery["error"] = XSS_SCRIPT
            delivery["response_excerpt"] = XSS_ATTR
            delivery["headers"]["x-note"] = XSS_ATTR
        deliveries.append(delivery)
        observation = {
            "at": ts(moment),
            "event_id": event_id,
            "effects": effects,
            "source": "sql",
            "after_seq": seq,
        }
        emails = step.unsafe_emails if unsafe else step.live_emails
        if emails is not None:
            observation["emails"] = emails
        observations.append(observation)
        if step.fault == "lost-ack":
            confirmations.append(
                {
                    "seq": seq,
                    "confirmed": True,
                    "effects": effects,
                    "observed_at": ts(moment),
                    "synthetic_status": 504,
                }
            )
    final = observations[-1]["effects"]
    violations = [violation_for(experiment, event_id, final, trial_id)] if final > 1 else []
    mailed = observations[-1].get("emails")
    if mailed is not None and mailed > 1:
        violations.append(
            {**violation_for(experiment, event_id, mailed, trial_id), "source": "emails",
             "detail": f"{mailed} receipts for one event after {experiment}"}
        )  # fmt: skip
    if hostile and violations:
        violations[0]["detail"] = XSS_SCRIPT + XSS_ATTR
    trial: dict[str, Any] = {
        "schema": "acklab/trial/v1",
        "run_id": run_id,
        "trial_id": trial_id,
        "target": target,
        "experiment": experiment,
        "index": index,
        "seed": seed,
        "event_ids": [event_id],
        "started_at": ts(start),
        "ended_at": ts(moment),
        "duration_ms": round((moment - start).total_seconds() * 1000, 1),
        "verdict": "fail" if violations else "pass",
        "deliveries": deliveries,
        "observations": observations,
        "violations": violations,
        "error": None,
    }
    if confirmations:
        trial["commit_confirmations"] = confirmations
    if experiment == "concurrent-duplicates":
        # As a real burst records it: the proof's facts name the burst, which each row then shows.
        facts = {"burst": 16, "burst_sync": "last-byte", "handler_spread_ms": 0.41}
        trial["fault"] = {
            "name": "burst",
            "landed": True,
            "tries": [{"try": 1, "event_ids": [event_id], "landed": True, "evidence": "16 of 16 duplicates were "
                       "at the handler within 0.4 ms", "facts": facts}],
        }  # fmt: skip
    return trial


def make_incident(
    *,
    run_id: str,
    target: str,
    experiment: str,
    seed: int,
    trials: int,
    created: datetime,
    hostile: bool,
    database: str = "sqlite",
) -> dict[str, Any]:
    """An incident: one target x experiment with every trial."""
    records = [
        make_trial(
            run_id=run_id,
            target=target,
            experiment=experiment,
            index=i,
            seed=seed,
            start=created + timedelta(seconds=i),
            hostile=hostile,
        )
        for i in range(trials)
    ]
    violations = [v for t in records for v in t["violations"]]
    latencies = sorted(d["latency_ms"] for t in records for d in t["deliveries"])
    failed = sum(t["verdict"] == "fail" for t in records)
    incident: dict[str, Any] = {
        "schema": "acklab/incident/v1",
        "incident_id": f"{slug(run_id)}-{slug(target)}-{slug(experiment)}",
        "run_id": run_id,
        "created_at": ts(created + timedelta(seconds=trials)),
        "target": {
            "name": target,
            "kind": "fixture",
            "handler": target.rsplit(":", maxsplit=1)[-1],
            "endpoint": "http://127.0.0.1:8765/webhooks/orders",
            "database": database,
            "commit_sha": None,
            "provider": "standard",
        },
        "experiment": {
            "name": experiment,
            "description": EXPERIMENTS.get(experiment, f"the {experiment} experiment"),
            "parameters": {"trials": trials},
        },
        "seed": seed,
        "invariants": ["at-most-once-effect", "acked-exactly-once"],
        "verdict": "fail" if violations else "pass",
        "summary": {
            "trials": trials,
            "passed": trials - failed,
            "failed": failed,
            "errors": 0,
            "latency_ms": {
                "p50": latencies[len(latencies) // 2],
                "p95": latencies[int(len(latencies) * 0.95) - 1 if len(latencies) > 1 else 0],
                "max": latencies[-1],
            },
        },
        "violations": violations,
        "trials": records,
        "boundary": BOUNDARY,
    }
    if hostile:
        incident["target"]["name"] = target + XSS_SCRIPT
        incident["experiment"]["description"] = XSS_SCRIPT + XSS_ATTR
        incident["boundary"] = BOUNDARY + XSS_ATTR
    return incident


def make_run_bundle(
    evidence: Path,
    *,
    run_id: str,
    target: str,
    seed: int = 7,
    experiments: tuple[str, ...] = tuple(EXPERIMENTS),
    trials: int = 3,
    created: datetime = BASE_TIME,
    pipeline: int = 4100,
    finalize: bool = True,
    hostile: bool = False,
    validate: bool = True,
    database: str = "sqlite",
) -> Path:
    """One run bundle (one target, several experiments) under `evidence`; returns its path."""
    writer = BundleWriter(evidence / run_id, kind="run")
    kind = (lambda k: k) if validate else (lambda _k: None)
    incidents = []
    entries = []
    for n, experiment in enumerate(experiments):
        incident = make_incident(
            run_id=run_id,
            target=target,
            experiment=experiment,
            seed=seed,
            trials=trials,
            created=created + timedelta(minutes=n),
            hostile=hostile,
            database=database,
        )
        incidents.append(incident)
        path = f"incidents/{incident['incident_id']}.json"
        writer.write_json(path, incident, kind=kind("incident"))
        for trial in incident["trials"]:
            name = f"trials/{slug(experiment)}-{trial['index']}.json"
            writer.write_json(name, trial, kind=kind("trial"))
        entries.append(
            {
                "name": experiment,
                "verdict": incident["verdict"],
                "trials": trials,
                "violations": incident["violations"],
                "incident": path,
            }
        )
    run = {
        "schema": "acklab/run/v1",
        "run_id": run_id,
        "verdict": "fail" if any(e["verdict"] == "fail" for e in entries) else "pass",
        "status": "complete" if finalize else "interrupted",
        "target": target,
        "seed": seed,
        "trials_per_experiment": trials,
        "started_at": ts(created),
        "ended_at": ts(created + timedelta(minutes=len(experiments))),
        "experiments": entries,
    }
    writer.write_json("run.json", run, kind=kind("run"))
    typed = [Incident.read(i) for i in incidents]
    writer.write_bytes("reports/junit.xml", experiments_junit(RunDocument.read(run), typed))
    writer.write_json(
        "reports/codequality.json", code_quality(2 if target.endswith("unsafe") else 0), kind=None
    )
    writer.write_json("reports/gl-sast-report.json", sast(1), kind=None)
    if finalize:
        writer.finalize(
            env=ci_env(pipeline, pipeline * 10 + seed, f"{pipeline:08x}" * 5),
            extra={"created_at": run["ended_at"]},
        )
    return writer.root


def make_flow_bundle(
    evidence: Path, *, run_id: str = "flow-0001", created: datetime = BASE_TIME, hostile: bool = False
) -> Path:
    writer = BundleWriter(evidence / run_id, kind="flow")
    trail = make_trail(run_id, created, hostile=hostile)
    writer.write_json("trail.json", trail, kind="trail")
    writer.write_bytes("checks/pytest.log", b"3 passed in 31.05s\n")
    return writer.finalize(env=ci_env(4200, 42001, "0123abcd" * 5), extra={"created_at": trail["ended_at"]})


def make_evidence(evidence: Path, *, runs: int = 2, hostile: bool = False) -> Path:
    """A small evidence directory: `runs` pairs of unsafe/live runs, a flow, a tampered and an incomplete bundle."""
    for n in range(runs):
        created = BASE_TIME + timedelta(hours=n)
        for target in ("fixture:unsafe", "fixture:live"):
            make_run_bundle(
                evidence,
                run_id=f"run-{n:04d}-{slug(target.split(':')[-1])}",
                target=target,
                created=created,
                pipeline=4100 + n,
                hostile=hostile and target.endswith("unsafe"),
            )
    make_flow_bundle(evidence, created=BASE_TIME + timedelta(hours=runs), hostile=hostile)
    tampered = make_run_bundle(
        evidence,
        run_id="run-tampered",
        target="fixture:live",
        experiments=("lost-ack",),
        trials=1,
        created=BASE_TIME - timedelta(days=1),
    )
    report = tampered / "reports" / "junit.xml"
    report.write_bytes(report.read_bytes().replace(b"failures=", b'failures="0" x='))
    make_run_bundle(
        evidence,
        run_id="run-incomplete",
        target="fixture:live",
        experiments=("replay",),
        trials=1,
        created=BASE_TIME - timedelta(days=2),
        finalize=False,
    )
    return evidence
