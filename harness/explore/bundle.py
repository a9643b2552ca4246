"""The explorer's evidence: one bundle per search or replay (``run.json``, the shrunk schedule's
trial, an incident carrying ``schedule``, a manifest), written the same for ``acklab explore``,
``acklab replay`` and ``webhook_lab.explore``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from acklab.evidence.bundle import BundleWriter, acklab_version
from acklab.evidence.clock import utcnow
from acklab.evidence.documents.incident import Incident, IncidentExperiment
from acklab.evidence.documents.run import RunDocument, RunExperiment
from acklab.evidence.documents.trial import TRIAL_SCHEMA, Trial
from acklab.harness.explore.explorer import EVENTS, MAX_BURST, STEPS, Failure
from acklab.harness.targets import Target

NAME = "explore"
INVARIANTS = ["at-most-once-effect", "acked-exactly-once", "conflict-rejected"]
DESCRIPTION = (
    f"Hypothesis generates delivery schedules over {EVENTS} events (sends, retries, bursts of up to "
    f"{MAX_BURST} identical deliveries released together, lost acknowledgements, conflicting bodies, in any "
    "order; beyond one event, where the target has the sections: an object's lifecycle events in any order, "
    "sibling events, the app's own request); the invariants are checked after every step and a failure is "
    "shrunk to a minimal schedule."
)


def invariants_of(target: Target) -> list[str]:
    """What the explorer checks on `target`: beyond one event too, where it has the sections."""
    objects = target.objects
    found = list(INVARIANTS)
    if len(objects.lifecycle) >= 2:
        found += ["newest-state-wins", "state-never-regresses"]
    if objects.siblings or objects.competitor is not None:
        found.append("at-most-once-per-object")
    return found


BOUNDARY = (
    "What this proves: within the explored budget, no generated schedule of sends, retries, concurrent "
    "duplicates, lost acknowledgements and conflicting bodies broke at-most-once effects, acknowledged "
    "exactly-once or conflict rejection in this target's own database. It is a search, not a proof over "
    "every schedule, and it does not prove exactly-once delivery across systems."
)


def _trial_record(run_id: str, seed: int, target: Target, failure: Failure, duration_ms: float) -> Trial:
    """The shrunk schedule's trial: its verdict is the schedule's checks', made step by step."""
    ctx = failure.runner.trial
    return Trial(
        schema=TRIAL_SCHEMA,
        run_id=run_id,
        trial_id=ctx.plan.trial_id,
        target=target.name,
        experiment=NAME,
        index=ctx.plan.index,
        seed=seed,
        event_ids=sorted({d.event_id for d in ctx.deliveries}),
        started_at=ctx.deliveries[0].sent_at if ctx.deliveries else utcnow(),
        ended_at=utcnow(),
        duration_ms=round(duration_ms, 3),
        verdict="fail" if failure.violations else "pass",
        deliveries=[d.document() for d in ctx.deliveries],
        observations=list(ctx.observations),
        commit_confirmations=list(ctx.confirmations),
        violations=list(failure.violations),
        error=None,
        parameters={"schedule": [s.record() for s in failure.runner.steps]},
    )


def write_bundle(
    out: Path,
    *,
    run_id: str,
    target: Target,
    target_ref: str,
    seed: int,
    started_at: str,
    failure: Failure | None,
    parameters: dict[str, Any],
    duration_ms: float,
) -> tuple[Path, str | None]:
    """The explorer's bundle; returns (bundle, incident path relative to it or None)."""
    writer = BundleWriter(out / run_id, kind="run", secrets=sorted(target.credentials()))
    trials = [_trial_record(run_id, seed, target, failure, duration_ms)] if failure else []
    for record in trials:
        writer.write_document(f"trials/{record.trial_id}.json", record)
    incident = Incident.build(
        incident_id=run_id.lower(),
        run_id=run_id,
        target=target.describe(),
        experiment=IncidentExperiment(
            name=NAME,
            description=DESCRIPTION,
            parameters={**parameters, "target_ref": target_ref, "events": EVENTS, "steps_per_example": STEPS},
        ),
        seed=seed,
        invariants=invariants_of(target),
        trials=trials,
        boundary=BOUNDARY,
        created_at=utcnow(),
        # A budget that found nothing has no trial to show: the search itself is the verdict.
        verdict="fail" if failure and failure.violations else "pass",
        schedule=[s.record() for s in failure.runner.steps] if failure else [],
    )
    rel = f"incidents/{run_id}.json".lower()
    writer.write_document(rel, incident)
    run = RunDocument.build(
        run_id=run_id,
        target=target.name,
        seed=seed,
        status="complete",
        started_at=started_at,
        ended_at=utcnow(),
        experiments=[RunExperiment.of_incident(incident, rel)],
        acklab_version=acklab_version(),
    )
    for path, data in target.attachments().items():
        writer.write_bytes(path, data)
    writer.write_document("run.json", run)
    writer.finalize()
    return writer.root, rel
