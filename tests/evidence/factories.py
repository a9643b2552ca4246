"""Valid evidence documents and bundles for tests (the shapes the harness writes)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from acklab.evidence.bundle import BundleWriter

T0 = "2026-01-01T00:00:00Z"
T1 = "2026-01-01T00:00:01Z"
SHA = "0" * 64
BOUNDARY = (
    "Proves at-most-once effects in this handler's own database under these faults; "
    "not exactly-once delivery across systems, and not a real network outage."
)


def violation(event_id: str, trial_id: str) -> dict[str, Any]:
    return {
        "invariant": "at-most-once-effect",
        "event_id": event_id,
        "observed": 2,
        "expected": "<= 1",
        "detail": "two fulfillments after a lost ack",
        "trial": trial_id,
    }


def trial(
    run_id: str, experiment: str, index: int, verdict: str = "pass", target: str = "fixture:live"
) -> dict[str, Any]:
    prefix = "" if target == "fixture:live" else target.replace(":", "-") + "-"
    trial_id = f"{prefix}{experiment}-{index:04d}"
    event_id = f"evt_{experiment}_{index}"
    return {
        "schema": "acklab/trial/v1",
        "run_id": run_id,
        "trial_id": trial_id,
        "target": target,
        "experiment": experiment,
        "index": index,
        "seed": 7,
        "event_ids": [event_id],
        "started_at": T0,
        "ended_at": T1,
        "duration_ms": 1000,
        "verdict": verdict,
        "deliveries": [
            {
                "seq": 0,
                "event_id": event_id,
                "attempt": 1,
                "kind": "original",
                "fault": "none",
                "sent_at": T0,
                "latency_ms": 10.0 + index,
                "status": 200,
                "sender_status": 200,
                "error": None,
                "headers": {"content-type": "application/json"},
                "body_sha256": SHA,
            }
        ],
        "observations": [
            {
                "at": T1,
                "event_id": event_id,
                "effects": 2 if verdict == "fail" else 1,
                "source": "fixture",
                "after_seq": 0,
            }
        ],
        "violations": [violation(event_id, trial_id)] if verdict == "fail" else [],
        "error": "lab could not reach the target" if verdict == "error" else None,
    }


def incident(
    run_id: str, experiment: str, trials: list[dict[str, Any]], target: str = "fixture:live"
) -> dict[str, Any]:
    verdicts = [t["verdict"] for t in trials]
    verdict = "error" if "error" in verdicts else "fail" if "fail" in verdicts else "pass"
    return {
        "schema": "acklab/incident/v1",
        "incident_id": experiment,
        "run_id": run_id,
        "created_at": T1,
        "target": {"name": target, "kind": "fixture", "handler": "live", "endpoint": "asgi://fixture"},
        "experiment": {"name": experiment, "description": f"the {experiment} experiment"},
        "seed": 7,
        "invariants": ["at-most-once-effect"],
        "verdict": verdict,
        "summary": {
            "trials": len(trials),
            "passed": verdicts.count("pass"),
            "failed": verdicts.count("fail"),
            "errors": verdicts.count("error"),
            "latency_ms": {"p50": 10.0, "p95": 10.0, "max": 10.0},
        },
        "violations": [v for t in trials for v in t["violations"]],
        "trials": trials,
        "boundary": BOUNDARY,
    }


def write_run_bundle(
    root: Path,
    run_id: str,
    plan: dict[str, list[tuple[int, str]]],
    *,
    shard: str | None = None,
    target: str = "fixture:live",
    env: dict[str, str] | None = None,
) -> Path:
    """A run bundle; `plan` maps experiment -> [(trial index, verdict)]."""
    writer = BundleWriter(root)
    experiments = []
    for experiment, trials_plan in plan.items():
        trials = [trial(run_id, experiment, i, v, target) for i, v in trials_plan]
        for t in trials:
            writer.write_json(f"trials/{t['trial_id']}.json", t, kind="trial")
        inc = incident(run_id, experiment, trials, target)
        writer.write_json(f"incidents/{experiment}.json", inc, kind="incident")
        experiments.append(
            {
                "name": experiment,
                "verdict": inc["verdict"],
                "trials": len(trials),
                "violations": inc["violations"],
                "incident": f"incidents/{experiment}.json",
                "error": None,
            }
        )
    verdicts = [e["verdict"] for e in experiments]
    run = {
        "schema": "acklab/run/v1",
        "run_id": run_id,
        "verdict": "error" if "error" in verdicts else "fail" if "fail" in verdicts else "pass",
        "status": "complete",
        "target": target,
        "seed": 7,
        "shard": shard,
        "started_at": T0,
        "ended_at": T1,
        "experiments": experiments,
    }
    writer.write_json("run.json", run, kind="run")
    writer.write_bytes("reports/junit.xml", b"<testsuites/>\n")
    return writer.finalize(env=env or {})


def journal_checkpoints(bundle: Path) -> None:
    """Record each trial file of `bundle` in its evidence directory's journal, as the run's
    journal consumer does when each trial finishes (``checkpoint`` with the file's sha256)."""
    from acklab.evidence.bundle import sha256_file
    from acklab.evidence.journal import Journal, journal_path

    with Journal(journal_path(bundle.parent)) as journal:
        for path in sorted((bundle / "trials").glob("*.json")):
            journal.record(
                run_id=bundle.name,
                kind="checkpoint",
                name=path.stem,
                status="ok",
                payload={"file": f"trials/{path.name}", "sha256": sha256_file(path)},
            )
