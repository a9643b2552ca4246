"""What the harness adds to the documents a run writes: the target, the experiment and the boundary.

The documents themselves (trial, incident, run.json, the ``--json`` object) are built by
their models in `acklab.evidence.documents`; this module turns the harness's own objects
(a `Target`, an `Experiment`, the plan) into what those builders take.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from acklab.evidence.bundle import acklab_version
from acklab.evidence.clock import utcnow
from acklab.evidence.documents.incident import Incident, IncidentExperiment
from acklab.evidence.documents.run import RunDocument, RunExperiment
from acklab.evidence.documents.trial import Trial
from acklab.harness.core.plan import RunPlan
from acklab.harness.experiments import Experiment
from acklab.harness.targets import Target


def boundary(target: Target, experiment: Experiment, socket: bool) -> str:
    """What the verdict proves and what it does not (shown wherever a verdict is)."""
    where = "over a real loopback socket" if socket else "in-process (ASGI, no socket)"
    return (
        f"What this proves: {experiment.proves}, in this target's own database ({target.database or 'unknown'}), under the "
        f"faults of '{experiment.name}' injected by the lab's sender {where}. It does not prove "
        "exactly-once delivery across systems, behaviour under faults not injected here, or survival of "
        "a real network outage (the faults are simulated at the sender, not on the network), and it sees "
        "only the effects the count query or probe counts."
    )


def incident(
    *,
    run_id: str,
    plan: RunPlan,
    target: Target,
    experiment: Experiment,
    trials: Sequence[Trial],
    socket: bool,
    parameters: Mapping[str, Any],
) -> Incident:
    """The incident of one experiment's finished trials."""
    return Incident.build(
        run_id=run_id,
        target=target.describe(),
        experiment=IncidentExperiment(
            name=experiment.name,
            description=experiment.description,
            time_compression=plan.settings.time_compression,
            parameters=dict(parameters),
            fault=experiment.fault_name,
            skipped_variants=experiment.skipped_variants(target) or None,
        ),
        seed=plan.seed,
        invariants=experiment.checks(target),
        trials=trials,
        boundary=boundary(target, experiment, socket),
        created_at=utcnow(),
    )


def run_document(
    *,
    run_id: str,
    plan: RunPlan,
    status: str,
    started_at: str,
    experiments: Sequence[RunExperiment],
    warnings: Sequence[str] = (),
) -> RunDocument:
    """run.json of a run of `plan` (a preliminary one while it runs: status ``interrupted``)."""
    return RunDocument.build(
        run_id=run_id,
        target=plan.target,
        seed=plan.seed,
        status="complete" if status == "complete" else "interrupted",
        started_at=started_at,
        ended_at=utcnow(),
        experiments=experiments,
        acklab_version=acklab_version(),
        trials_per_experiment=plan.trials_per_experiment,
        shard=plan.shard_label,
        warnings=warnings,
    )
