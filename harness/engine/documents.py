"""The documents a run writes: trial records, incidents, run.json, and the ``--json`` result.

Shapes are those of ``evidence/schemas`` (trial, incident, run); the bundle writer
validates every one before it is written.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from acklab.evidence.bundle import acklab_version, utcnow
from acklab.harness.core.plan import RunPlan
from acklab.harness.core.verdicts import combine
from acklab.harness.experiments import Experiment
from acklab.harness.targets import Target

DESIGN_VIOLATION_KEYS = ("invariant", "event_id", "observed", "expected", "detail")


def incident_id(run_id: str, experiment: str) -> str:
    return f"{run_id}-{experiment}".lower()


def boundary(target: Target, experiment: Experiment, socket: bool) -> str:
    """What the verdict proves and what it does not (shown wherever a verdict is)."""
    where = "over a real loopback socket" if socket else "in-process (ASGI, no socket)"
    return (
        "What this proves: at most one side effect per event, and exactly one for every event the "
        f"handler acknowledged, in this target's own database ({target.database or 'unknown'}), under the "
        f"faults of '{experiment.name}' injected by the lab's sender {where}. It does not prove "
        "exactly-once delivery across systems, behaviour under faults not injected here, or survival of "
        "a real network outage (the faults are simulated at the sender, not on the network), and it sees "
        "only the effects the count query or probe counts."
    )


def _latency(trials: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    values = sorted(d["latency_ms"] for t in trials for d in t["deliveries"] if d["status"] is not None)
    if not values:
        return {}
    p95 = values[min(len(values) - 1, round(0.95 * (len(values) - 1)))]
    return {"p50": round(statistics.median(values), 3), "p95": round(p95, 3), "max": round(values[-1], 3)}


def _proving_try(trial: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The try a trial's fault proof rests on: the one that landed, else the last."""
    tries = (trial.get("fault") or {}).get("tries") or []
    return next((t for t in tries if t.get("landed")), tries[-1] if tries else None)


def _p50_max(values: Sequence[float]) -> dict[str, float]:
    return {"p50": round(statistics.median(values), 3), "max": round(max(values), 3)}


def arrival_spread(trials: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """How close together the bursts of these trials arrived (harness.core.bursts), None without bursts.

    ``release_ms``: first to last final byte the sender wrote; ``handler_ms``: first to last
    request entering the handler, where the handler reported it (the fixture, the bench's
    racy handler), over each trial's proving try."""
    facts = [f for t in trials if (p := _proving_try(t)) and "burst_sync" in (f := p.get("facts") or {})]
    if not facts:
        return None
    release = [float(f["release_spread_ms"]) for f in facts if f.get("release_spread_ms") is not None]
    handler = [float(f["handler_spread_ms"]) for f in facts if f.get("handler_spread_ms") is not None]
    return {
        "burst_sync": ", ".join(sorted({str(f["burst_sync"]) for f in facts})),
        "bursts": len(facts),
        **({"release_ms": _p50_max(release)} if release else {}),
        **({"handler_ms": _p50_max(handler)} if handler else {}),
    }


def fault_landed(trials: Sequence[Mapping[str, Any]]) -> int:
    """How many trials proved that their fault landed."""
    return sum(bool((t.get("fault") or {}).get("landed")) for t in trials)


def reason(
    trials: Sequence[Mapping[str, Any]], skipped_variants: Mapping[str, str] | None = None
) -> str | None:
    """What a reader needs besides the verdict: the trials' errors, and the variants skipped."""
    errors = sorted({t["error"] for t in trials if t.get("error")})
    parts = ["; ".join(errors)[:2000]] if errors else []
    parts += [f"{name} skipped: {why}" for name, why in (skipped_variants or {}).items()]
    return " | ".join(parts) or None


def incident(
    *,
    run_id: str,
    plan: RunPlan,
    target: Target,
    experiment: Experiment,
    trials: Sequence[dict[str, Any]],
    socket: bool,
    parameters: Mapping[str, Any],
) -> dict[str, Any]:
    verdicts = [t["verdict"] for t in trials]
    violations = [v for t in trials for v in t["violations"]]
    skipped_variants = experiment.skipped_variants(target)
    spread = arrival_spread(trials)
    return {
        "schema": "acklab/incident/v1",
        "incident_id": incident_id(run_id, experiment.name),
        "run_id": run_id,
        "created_at": utcnow(),
        "target": target.describe(),
        "experiment": {
            "name": experiment.name,
            "description": experiment.description,
            "time_compression": plan.settings.time_compression,
            "parameters": dict(parameters),
            "fault": experiment.fault_name,
            **({"skipped_variants": skipped_variants} if skipped_variants else {}),
        },
        "seed": plan.seed,
        "invariants": list(experiment.invariants),
        "verdict": combine(verdicts),
        "summary": {
            "trials": len(trials),
            "passed": verdicts.count("pass"),
            "failed": verdicts.count("fail"),
            "errors": verdicts.count("error"),
            "fault_landed": fault_landed(trials),
            "reason": reason(trials),
            "latency_ms": _latency(trials),
            **({"arrival_spread": spread} if spread else {}),
        },
        "violations": violations,
        "trials": list(trials),
        "boundary": boundary(target, experiment, socket),
    }


def run_entry(
    name: str,
    trials: Sequence[Mapping[str, Any]],
    incident_path: str | None,
    error: str | None = None,
    *,
    skipped_variants: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """One experiment of run.json: verdict, trials, fault_landed, violations, reason."""
    verdict = combine([t["verdict"] for t in trials]) if trials else "error"
    why = error or reason(trials, skipped_variants)
    spread = arrival_spread(trials)
    return {
        "name": name,
        "verdict": verdict,
        "trials": len(trials),
        "fault_landed": fault_landed(trials),
        "violations": [v for t in trials for v in t["violations"]],
        "incident": incident_path,
        "error": error or reason(trials) if verdict != "pass" else None,
        "reason": why,
        **({"skipped_variants": dict(skipped_variants)} if skipped_variants else {}),
        **({"arrival_spread": spread} if spread else {}),
    }


def skipped_entry(name: str, why: str) -> dict[str, Any]:
    """An experiment that does not apply to the target: listed, never judged."""
    return {
        "name": name,
        "verdict": "skipped",
        "trials": 0,
        "fault_landed": 0,
        "violations": [],
        "incident": None,
        "error": None,
        "reason": why,
    }


def run_document(
    *,
    run_id: str,
    plan: RunPlan,
    status: str,
    started_at: str,
    experiments: list[dict[str, Any]],
) -> dict[str, Any]:
    # combine: a proven violation anywhere outweighs errors elsewhere; skipped counts for nothing.
    verdict = combine([e["verdict"] for e in experiments]) if status == "complete" else "error"
    return {
        "schema": "acklab/run/v1",
        "run_id": run_id,
        "verdict": verdict,
        "status": status,
        "target": plan.target,
        "seed": plan.seed,
        "trials_per_experiment": plan.trials_per_experiment,
        "shard": plan.shard_label,
        "started_at": started_at,
        "ended_at": utcnow(),
        "acklab_version": acklab_version(),
        "experiments": experiments,
    }


def design_json(run: Mapping[str, Any], bundle: str) -> dict[str, Any]:
    """The ``acklab run --json`` object of the README (``--json``), exactly (paths absolute)."""
    errors = [f"{e['name']}: {e['reason']}" for e in run["experiments"] if e["verdict"] == "error"]
    return {
        "run_id": run["run_id"],
        "verdict": run["verdict"],
        "target": run["target"],
        "error": "; ".join(errors)[:4000] or "nothing was judged" if run["verdict"] == "error" else None,
        "experiments": [
            {
                "name": e["name"],
                "verdict": e["verdict"],
                "trials": e["trials"],
                "reason": e.get("reason", e.get("error")),
                "fault_landed": e.get("fault_landed", 0),
                "violations": [
                    {k: v[k] for k in (*DESIGN_VIOLATION_KEYS, "delivery") if k in v} for v in e["violations"]
                ],
                "incident": f"{bundle}/{e['incident']}" if e["incident"] else None,
                **({"skipped_variants": e["skipped_variants"]} if e.get("skipped_variants") else {}),
            }
            for e in run["experiments"]
        ],
        "bundle": bundle,
    }


def error_json(target: str, error: str) -> dict[str, Any]:
    """The ``--json`` object of a run that ended before it had a verdict (exit 3-7)."""
    return {
        "run_id": None,
        "verdict": "error",
        "target": target,
        "error": error,
        "experiments": [],
        "bundle": None,
    }
