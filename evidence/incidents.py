"""Incidents across shards: one target x experiment whose trials may be split between CI jobs.

`merge_group` gives the merged run.json entry and incident of one target x experiment. An
incident held by one shard is kept unchanged; one split across shards is built again from
the union of its trials by the one incident builder (`Incident.build`: summary, verdict,
latency as the harness computes them), under the merged run's id.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from acklab.evidence.clock import utcnow
from acklab.evidence.documents.incident import Incident
from acklab.evidence.documents.run import RunExperiment
from acklab.evidence.documents.trial import Trial
from acklab.evidence.documents.verdicts import combine
from acklab.evidence.errors import IntegrityError


@dataclass
class Group:
    """Everything the shards say about one target x experiment."""

    target: str
    experiment: str
    entries: list[RunExperiment] = field(default_factory=list)  # run.json experiment entries
    incidents: list[tuple[str, Incident]] = field(default_factory=list)  # (relpath, incident)


def _trials(group: Group) -> list[Trial]:
    by_id: dict[str, Trial] = {}
    for rel, incident in group.incidents:
        for trial in incident.trials:
            known = by_id.get(trial.trial_id)
            if known is not None and known != trial:
                raise IntegrityError(
                    f"trial {trial.trial_id!r} of {group.target} x {group.experiment} has two different "
                    f"records (one in {rel}); merge shards of one run only"
                )
            by_id[trial.trial_id] = trial
    return sorted(by_id.values(), key=lambda t: (t.index, t.trial_id))


def _path(preferred: str, target: str, incident_id: str, taken: set[str]) -> str:
    if preferred not in taken:
        return preferred
    slug = re.sub(r"[^a-z0-9._-]+", "-", target.lower()).strip("-.") or "target"
    return f"incidents/{slug}-{incident_id}.json"


def _first_error(group: Group) -> str | None:
    return next((e.error for e in group.entries if e.error), None)


def merge_group(
    group: Group, *, run_id: str, taken: set[str]
) -> tuple[RunExperiment, str | None, Incident | None]:
    """The merged run.json entry, incident path and incident of one target x experiment."""
    if not group.incidents:
        return RunExperiment.merged(group.entries), None, None

    base_rel, base = group.incidents[0]
    if len(group.incidents) == 1:
        incident = base
    else:
        trials = _trials(group)
        # incident ids are namespaced by run id (harness: "<run_id>-<experiment>"); a
        # rebuilt incident belongs to the merged run, so it takes the merged run's prefix
        shard_prefix = f"{base.run_id}-".lower()
        incident_id = base.incident_id
        if incident_id.startswith(shard_prefix):
            incident_id = f"{run_id}-{incident_id[len(shard_prefix) :]}".lower()
            base_rel = f"incidents/{incident_id}.json"
        incident = Incident.build(
            incident_id=incident_id,
            run_id=run_id,
            target=base.target,
            experiment=base.experiment,
            seed=base.seed,
            invariants=list(dict.fromkeys(x for _, i in group.incidents for x in i.invariants)),
            trials=trials,
            boundary=base.boundary,
            created_at=utcnow(),
            verdict=combine([t.verdict for t in trials] + [i.verdict for _, i in group.incidents]),
        )
    rel = _path(base_rel, group.target, incident.incident_id, taken)
    return RunExperiment.of_incident(incident, rel, _first_error(group)), rel, incident
