"""Merging shards: the bundles of parallel CI jobs combined into one bundle (manifest kind "merged").

Every input is verified against its manifest first; one tampered shard and nothing is written
(exit 7). Then:

- trials are united by trial id: the same trial twice is kept once when both copies are
  byte-identical, and refused (exit 7, naming both shards) when they differ;
- an incident per target x experiment is kept as it is when one shard holds it, and
  recomputed from the union of its trials when shards split the experiment (``"shard": "I/N"``);
- run.json is merged by its builder (`RunDocument.build`): the verdict combines the
  experiments' as a run does (a proven violation outweighs an error elsewhere), status
  "complete" only when every shard is complete and, for sharded runs, every shard 1..N is
  present; like `acklab run`, an incomplete run's verdict is "error";
- reports/junit.xml is regenerated; other identical files are kept once, differing ones
  refused; each input manifest is kept as ``sources/<bundle_id>.manifest.json`` so the
  shards' CI metadata and hashes stay part of the evidence, and each shard's
  ``service.log`` (the output of the service it started) as ``sources/<bundle_id>.service.log``;
- the bundle is written beside its destination and renamed into place when complete.
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from acklab.evidence.bundle import MANIFEST, BundleWriter, acklab_version, bundle_files, load_manifest, verify
from acklab.evidence.documents.incident import Incident
from acklab.evidence.documents.run import RunDocument, RunExperiment
from acklab.evidence.errors import EvidenceInvalid, IntegrityError
from acklab.evidence.incidents import Group, merge_group
from acklab.evidence.loading import load_evidence_json
from acklab.evidence.reports.junit import experiments_junit

JUNIT = "reports/junit.xml"
PER_SHARD = frozenset({"service.log"})  # files every shard has its own of (and sinks/*.json)


@dataclass
class Shard:
    """One verified input bundle and what the merge reads from it."""

    root: Path
    manifest: dict[str, Any]
    run: RunDocument
    manifest_sha256: str
    incidents: dict[str, Incident] = field(default_factory=dict)  # relpath -> incident

    @property
    def bundle_id(self) -> str:
        return str(self.manifest["bundle_id"])


def load_shard(root: Path) -> Shard:
    """Verify a bundle and read it as a shard; IntegrityError (exit 7) when it is not intact."""
    result = verify(root)
    if not result.ok:
        raise IntegrityError(
            f"shard {root} failed verification, nothing was merged: " + "; ".join(result.describe())
        )
    manifest = load_manifest(root)
    if manifest["kind"] not in ("run", "merged"):
        raise EvidenceInvalid(
            f"{root} is a {manifest['kind']!r} bundle; only run bundles (and merged ones) can be merged"
        )
    if not (root / "run.json").is_file():
        raise EvidenceInvalid(f"{root} has no run.json; expected a run bundle")
    # bounded, never through a link (exit 7); read with the documents' own models
    shard = Shard(
        root=root,
        manifest=manifest,
        run=RunDocument.read(load_evidence_json(root / "run.json"), what=str(root / "run.json")),
        manifest_sha256=hashlib.sha256((root / MANIFEST).read_bytes()).hexdigest(),
    )
    for rel in manifest["files"]:
        if rel.startswith("incidents/") and rel.endswith(".json"):
            shard.incidents[rel] = Incident.read(load_evidence_json(root / rel), what=str(root / rel))
    return shard


def _merged_run_id(shards: list[Shard]) -> str:
    ids = sorted({s.run.run_id for s in shards})
    if len(ids) == 1:
        return ids[0]
    digest = hashlib.sha256("\n".join(ids).encode()).hexdigest()[:12]
    return f"merged-{digest}"


def _status(shards: list[Shard]) -> Literal["complete", "interrupted"]:
    if any(s.run.status != "complete" for s in shards):
        return "interrupted"
    declared = [s.run.shard for s in shards if s.run.shard]
    if declared:
        totals = {int(d.split("/")[1]) for d in declared}
        present = {int(d.split("/")[0]) for d in declared}
        if len(totals) != 1 or present != set(range(1, totals.pop() + 1)):
            return "interrupted"
    return "complete"


def _copy_plain_files(shards: list[Shard], out: dict[str, tuple[bytes, str]]) -> None:
    """Trials and other files: one copy when identical, refused when they differ."""
    for shard in shards:
        for rel in bundle_files(shard.root):
            if rel in ("run.json", JUNIT) or rel.startswith("incidents/"):
                continue
            data = (shard.root / rel).read_bytes()
            if rel in PER_SHARD or rel.startswith(
                "sinks/"
            ):  # each shard's own witness (its service's log): kept beside its manifest
                out[f"sources/{shard.bundle_id}.{rel}"] = (data, shard.bundle_id)
                continue
            if rel in out and out[rel][0] != data:
                what = f"trial {Path(rel).stem!r}" if rel.startswith("trials/") else f"file {rel!r}"
                raise IntegrityError(
                    f"{what} differs between shards {out[rel][1]} and {shard.bundle_id}; "
                    "the same record cannot have two contents — merge shards of one run only"
                )
            out.setdefault(rel, (data, shard.bundle_id))


def _groups(shards: list[Shard]) -> dict[tuple[str, str], Group]:
    groups: dict[tuple[str, str], Group] = {}
    for shard in shards:
        by_path = dict(shard.incidents)
        for entry in shard.run.experiments:
            incident = by_path.pop(entry.incident, None) if entry.incident else None
            # a merged input's run.json names several targets; its incidents name one each
            target = incident.target.name if incident else shard.run.target
            key = (target, entry.name)
            group = groups.setdefault(key, Group(target=key[0], experiment=key[1]))
            group.entries.append(entry)
            if incident is not None and entry.incident:
                group.incidents.append((entry.incident, incident))
        for rel, incident in by_path.items():  # incidents run.json does not point at
            key = (incident.target.name, incident.experiment.name)
            groups.setdefault(key, Group(target=key[0], experiment=key[1])).incidents.append((rel, incident))
    return groups


def merge(inputs: list[Path], out_dir: Path, *, run_id: str | None = None) -> Path:
    """Merge the bundles `inputs` into a new bundle under `out_dir`; return its path."""
    if not inputs:
        raise EvidenceInvalid("nothing to merge: give at least one bundle")
    unique = list(dict.fromkeys(p.resolve() for p in inputs))
    shards = [load_shard(p) for p in unique]
    merged_id = run_id or _merged_run_id(shards)
    destination = Path(out_dir) / merged_id
    if destination.exists():
        raise EvidenceInvalid(
            f"{destination} already exists; choose another --out or --run-id (bundles are never overwritten)"
        )
    files: dict[str, tuple[bytes, str]] = {}
    _copy_plain_files(shards, files)
    incidents: dict[str, Incident] = {}
    experiments: list[RunExperiment] = []
    for _, group in sorted(_groups(shards).items()):
        entry, rel, incident = merge_group(group, run_id=merged_id, taken=set(incidents))
        if incident is not None and rel is not None:
            incidents[rel] = incident
        experiments.append(entry)
    run = _merged_run(shards, merged_id, experiments)
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=out_dir, prefix=f".{merged_id}.", suffix=".partial"))
    try:
        _write_merged(staging, shards, run, files, incidents)
        staging.rename(destination)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return destination


def _merged_run(shards: list[Shard], merged_id: str, experiments: list[RunExperiment]) -> RunDocument:
    """The merged bundle's run.json: the shards' span, targets, warnings and status as one run's."""
    ordered = sorted(shards, key=lambda s: (s.run.shard or "", s.bundle_id))
    targets = sorted({s.run.target for s in shards})
    per_experiment = [s.run.trials_per_experiment for s in shards]
    trials = max(t for t in per_experiment if t is not None) if None not in per_experiment else None
    return RunDocument.build(
        run_id=merged_id,
        target=targets[0] if len(targets) == 1 else ", ".join(targets),
        seed=ordered[0].run.seed,
        # as `acklab run` does: a run that is not complete cannot vouch for a verdict
        status=_status(shards),
        started_at=min(s.run.started_at for s in shards),
        ended_at=max(s.run.ended_at for s in shards),
        experiments=experiments,
        acklab_version=acklab_version(),
        trials_per_experiment=trials,
        shard=None,
        warnings=list(dict.fromkeys(w for s in ordered for w in s.run.warnings or ())),
    )


def _write_merged(
    staging: Path,
    shards: list[Shard],
    run: RunDocument,
    files: dict[str, tuple[bytes, str]],
    incidents: dict[str, Incident],
) -> None:
    """The merged bundle's files into `staging`, its manifest last."""
    # An incident one shard held alone is kept byte for byte: its file, not a rewrite of it.
    originals = {
        id(incident): shard.root / rel for shard in shards for rel, incident in shard.incidents.items()
    }
    writer = BundleWriter(staging, kind="merged", bundle_id=run.run_id)
    for rel, (data, _) in sorted(files.items()):
        writer.write_bytes(rel, data)
    for rel, incident in sorted(incidents.items()):
        original = originals.get(id(incident))
        if original is not None:
            writer.write_bytes(rel, original.read_bytes())
        else:
            writer.write_document(rel, incident)
    writer.write_document("run.json", run)
    writer.write_bytes(JUNIT, experiments_junit(run, list(incidents.values())))
    for shard in shards:
        writer.write_bytes(f"sources/{shard.bundle_id}.{MANIFEST}", (shard.root / MANIFEST).read_bytes())
    ordered = sorted(shards, key=lambda s: (s.run.shard or "", s.bundle_id))
    writer.finalize(extra={"merged_from": [f"{s.bundle_id}@sha256:{s.manifest_sha256}" for s in ordered]})
