"""Run bundles of chosen handlers with chosen verdicts: several pipelines, several revisions, a repair.

Each incident is a realistic one from `tests.console.samples` (a handler that double-fulfils
when it fails, keeps one effect when it passes), re-labelled with the target name and the
handler revision a scenario needs, and written with BundleWriter (so it validates).
"""

from __future__ import annotations

import hashlib
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from acklab.evidence.bundle import BundleWriter
from acklab.flows.lab import ExperimentResult, LabRun
from acklab.flows.report import run_outputs
from tests.console.sample_docs import ci_env, make_trail, ts
from tests.console.samples import make_incident, slug


def handler_hash(name: str) -> str:
    """A stand-in sha256 for a handler module's source (`target.handler_sha256`)."""
    return hashlib.sha256(name.encode()).hexdigest()


def write_run(
    root: Path,
    *,
    run_id: str,
    target: str,
    verdicts: dict[str, str],
    created: datetime,
    handler: str,
    seed: int = 7,
    pipeline: int | None = None,
    commit: str = "c0ffee00" * 5,
) -> Path:
    """A run bundle at `root`: one incident per experiment with the verdict `verdicts` gives it."""
    writer = BundleWriter(root, kind="run")
    entries = []
    for n, (experiment, verdict) in enumerate(verdicts.items()):
        behaviour = "fixture:unsafe" if verdict == "fail" else "fixture:live"
        incident = make_incident(
            run_id=run_id,
            target=behaviour,
            experiment=experiment,
            seed=seed,
            trials=1,
            created=created + timedelta(minutes=n),
            hostile=False,
        )
        incident["incident_id"] = f"{slug(run_id)}-{slug(experiment)}"
        incident["target"].update(name=target, handler=target.rsplit(":", 1)[-1], commit_sha=commit)
        incident["target"]["handler_sha256"] = handler_hash(handler)
        for trial in incident["trials"]:
            trial["target"] = target
        path = f"incidents/{incident['incident_id']}.json"
        writer.write_json(path, incident, kind="incident")
        entries.append(
            {
                "name": experiment,
                "verdict": incident["verdict"],
                "trials": 1,
                "violations": incident["violations"],
                "incident": path,
            }
        )
    end = created + timedelta(minutes=len(verdicts))
    run = {
        "schema": "acklab/run/v1",
        "run_id": run_id,
        "verdict": "fail" if "fail" in verdicts.values() else "pass",
        "status": "complete",
        "target": target,
        "seed": seed,
        "trials_per_experiment": 1,
        "started_at": ts(created),
        "ended_at": ts(end),
        "experiments": entries,
    }
    writer.write_json("run.json", run, kind="run")
    env = ci_env(pipeline, pipeline * 10, commit) if pipeline is not None else {}
    return writer.finalize(env=env, extra={"created_at": ts(end)})


def lab_run(run_id: str, bundle: Path, verdicts: dict[str, str]) -> LabRun:
    """What the repair flow's lab returns for a run (as `flows.lab.run_lab` parses it)."""
    experiments = {
        name: ExperimentResult(
            name=name,
            verdict=verdict,
            trials=1,
            incident=str(bundle / "incidents" / f"{slug(run_id)}-{slug(name)}.json"),
        )
        for name, verdict in verdicts.items()
    }
    return LabRun(
        run_id,
        "fail" if "fail" in verdicts.values() else "pass",
        "fixture:live",
        str(bundle),
        experiments,
        0,
        "app/webhooks.py",
    )


def write_repair(evidence: Path, *, created: datetime) -> dict[str, Path]:
    """The demo's repair story: a sandbox whose fixture:live is the unsafe handler, repaired.

    Its lab runs sit in the evidence directory beside the project's own runs, under the
    target's own name (fixture:live); the trail names them with the outputs the flow writes
    (`flows.report.run_outputs`).
    """
    aimed, struck = {"lost-ack": "fail"}, {"concurrent-duplicates": "fail"}
    runs = {
        "reproduce": ("flow-head-1", "unsafe", aimed),
        "verify": ("flow-patched-1", "repaired", {"lost-ack": "pass"}),
        "before": ("flow-head-2", "unsafe", struck),
        "after": ("flow-patched-2", "repaired", {"concurrent-duplicates": "pass"}),
    }
    written: dict[str, Path] = {}
    outputs: dict[str, Any] = {}
    for n, (step, (run_id, handler, verdicts)) in enumerate(runs.items()):
        bundle = write_run(
            evidence / run_id,
            run_id=run_id,
            target="fixture:live",
            verdicts=verdicts,
            created=created + timedelta(minutes=5 * n),
            handler=handler,
            commit="5a4db0c5" * 5,
        )
        written[step] = bundle
        outputs[step] = run_outputs(lab_run(run_id, bundle, verdicts), evidence).dump()
    trail = make_trail("flow-repair", created + timedelta(minutes=30))
    by_name = {c["name"]: c for c in trail["checkpoints"]}
    by_name["reproduce"]["outputs"] = outputs["reproduce"] | {"failing": ["lost-ack"]}
    by_name["verify"]["outputs"] = outputs["verify"] | {"checks": []}
    by_name["strike-again"]["outputs"] = {
        "before": outputs["before"],
        "after": outputs["after"],
        "experiments": [],
        "aimed": [],
        "gaps": [],
    }
    writer = BundleWriter(evidence / "flow-repair", kind="flow")
    writer.write_json("trail.json", trail, kind="trail")
    written["trail"] = writer.finalize(extra={"created_at": trail["ended_at"]})
    return written
