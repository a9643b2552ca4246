"""`acklab evidence pull --last N`: the evidence of a branch's last N pipelines, for the history view.

Each pipeline is pulled as `acklab evidence pull --pipeline ID` pulls one (`evidence.pull`):
verified before anything is stored, all or nothing *per pipeline*, under
``OUT/pipeline-<id>/``. One pipeline never spoils the others:

* a pipeline already under OUT is kept as it is (a rerun only fetches what is new);
* a pipeline with no evidence (no archive, artifacts expired, no job of that name) is noted;
* a pipeline whose evidence fails verification stores nothing and is named; the pull
  carries on with the others and exits 7 at the end, so a tampered pipeline never reaches a
  console while the verified ones still do.

GitLab refusing the token or being unreachable stops the whole pull (exit 4), as does the
total budget: what every pipeline stored is counted against `PullCaps.total`, and the
pipelines past it are not fetched (noted, exit 0: the history is shorter, not wrong).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from acklab.evidence.errors import EvidenceInvalid, IntegrityError
from acklab.evidence.gitlab_source import GitLabAccess, recent_pipelines
from acklab.evidence.pull import PullCaps, PulledBundle, pull

PULLED, ALREADY, EMPTY, REFUSED, OVER_BUDGET = (
    "pulled",
    "already pulled",
    "no evidence",
    "refused",
    "over budget",
)


@dataclass(frozen=True)
class PipelinePull:
    """What became of one pipeline of the history."""

    pipeline: int
    status: str
    detail: str = ""
    bundles: list[PulledBundle] = field(default_factory=list)


def _stored_bytes(bundles: Sequence[PulledBundle]) -> int:
    return sum(p.stat().st_size for b in bundles for p in b.path.rglob("*") if p.is_file())


def pull_history(
    access: GitLabAccess,
    *,
    project: str,
    ref: str,
    last: int,
    out_dir: Path,
    exclude: frozenset[int] = frozenset(),
    job_name: str | None = None,
    caps: PullCaps | None = None,
) -> list[PipelinePull]:
    """Pull the verified evidence of `ref`'s last `last` finished pipelines, newest first."""
    caps = caps or PullCaps()
    remaining = caps.total
    outcomes: list[PipelinePull] = []
    for pipeline in recent_pipelines(access, project, ref=ref, last=last, exclude=exclude):
        if (Path(out_dir) / f"pipeline-{pipeline}").exists():
            outcomes.append(PipelinePull(pipeline, ALREADY, f"kept as it is under {out_dir}"))
            continue
        if remaining <= 0:
            outcomes.append(PipelinePull(pipeline, OVER_BUDGET, f"the pull reached {caps.total:,} bytes"))
            continue
        budget = PullCaps(download=min(caps.download, remaining), total=remaining)
        try:
            bundles = pull(
                access, project=project, pipeline=pipeline, out_dir=out_dir, job_name=job_name, caps=budget
            )
        except IntegrityError as exc:
            outcomes.append(PipelinePull(pipeline, REFUSED, str(exc)))
            continue
        except EvidenceInvalid as exc:
            outcomes.append(PipelinePull(pipeline, EMPTY, str(exc)))
            continue
        remaining -= _stored_bytes(bundles)
        outcomes.append(PipelinePull(pipeline, PULLED, f"{len(bundles)} bundle(s)", bundles))
    return outcomes
