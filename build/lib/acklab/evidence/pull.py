"""`acklab evidence pull`: a pipeline's bundles, fetched from GitLab and verified before they are kept.

Trust rule. Every bundle found in the artifact archives (any directory holding
manifest.json) is verified against its own manifest *before anything is stored*. If one
bundle of the pipeline fails — a changed, missing or extra file, an unreadable manifest,
an archive that is not a sound zip — the pull stores nothing at all and exits 7 naming
each bundle and file: a tampered artifact is never stored, not even under a quarantine
name, so no evidence directory, console or merge can pick it up by mistake.

Marking. A verified bundle is stored as ``OUT/pipeline-<id>/<job>-<job id>/<bundle>/``
(jobs of a sharded run carry the same bundle id, so each job has its own directory). Its
manifest gains ``pulled_from`` (GitLab URL, project, pipeline, job, job id, time,
``verified: true`` and the sha256 of the manifest as GitLab served it); the ``files``
table is untouched, so `acklab evidence verify` still checks every original file.

Archives are unpacked defensively: no absolute paths, no ``..``, no links, bounded size.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import stat
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from acklab.evidence.bundle import MANIFEST, atomic_write, dump_json, utcnow, verify
from acklab.evidence.errors import EvidenceError, EvidenceInvalid, IntegrityError
from acklab.evidence.gitlab_source import ArtifactJob, GitLabAccess, PipelineArtifacts
from acklab.evidence.validate import validate

MAX_UNPACKED_BYTES = 2 << 30
MAX_MEMBERS = 200_000


@dataclass(frozen=True)
class PulledBundle:
    """A bundle that verified and was stored."""

    path: Path
    bundle_id: str
    job: str
    job_id: int


@dataclass(frozen=True)
class _Found:
    job: ArtifactJob
    root: Path  # the unpacked bundle in the staging area
    relpath: str  # where it sat in the archive


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-.") or "job"


def unpack(archive: Path, into: Path, *, what: str) -> None:
    """Unpack a zip refusing absolute paths, `..`, links and oversized content (IntegrityError)."""
    try:
        with zipfile.ZipFile(archive) as zf:
            members = zf.infolist()
            if len(members) > MAX_MEMBERS or sum(m.file_size for m in members) > MAX_UNPACKED_BYTES:
                raise IntegrityError(f"{what}: the archive is larger than acklab unpacks; refusing it")
            for member in members:
                name = PurePosixPath(member.filename)
                if name.is_absolute() or ".." in name.parts or "\\" in member.filename:
                    raise IntegrityError(
                        f"{what}: archive member {member.filename!r} points outside the archive"
                    )
                if stat.S_ISLNK(member.external_attr >> 16):
                    raise IntegrityError(f"{what}: archive member {member.filename!r} is a link; refusing it")
                if member.is_dir():
                    continue
                target = into.joinpath(*name.parts)
                target.parent.mkdir(parents=True, exist_ok=True)
                with zf.open(member) as src, target.open("wb") as dst:
                    shutil.copyfileobj(src, dst)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError) as exc:
        raise IntegrityError(f"{what}: not a sound zip archive ({exc})") from exc


def _bundles_under(root: Path) -> list[Path]:
    return sorted(p.parent for p in root.rglob(MANIFEST) if p.is_file())


def _mark(found: _Found, source: PipelineArtifacts) -> None:
    path = found.root / MANIFEST
    original = path.read_bytes()
    manifest: dict[str, Any] = json.loads(original)
    manifest["pulled_from"] = {
        "gitlab_url": source.access.url,
        "project": source.project_ref,
        "pipeline": str(source.pipeline_id),
        "job": found.job.name,
        "job_id": str(found.job.id),
        "pulled_at": utcnow(),
        "verified": True,
        "original_manifest_sha256": hashlib.sha256(original).hexdigest(),
    }
    if source.pipeline_url:
        manifest["pulled_from"]["pipeline_url"] = source.pipeline_url
    validate("manifest", manifest, what=f"pulled {found.relpath}/{MANIFEST}")
    atomic_write(path, dump_json(manifest))


def pull(
    access: GitLabAccess,
    *,
    project: str,
    pipeline: int,
    out_dir: Path,
    job_name: str | None = None,
) -> list[PulledBundle]:
    """Fetch, verify and store every bundle of a pipeline's artifacts (all or nothing)."""
    source = PipelineArtifacts(access, project, pipeline)
    jobs = source.jobs()
    if job_name is not None:
        named = [j for j in jobs if j.name == job_name]
        if not named:
            names = ", ".join(sorted({j.name for j in jobs})) or "none"
            raise EvidenceInvalid(f"pipeline {pipeline} has no job named {job_name!r}; its jobs: {names}")
        jobs = named
    with_archive = [j for j in jobs if source.has_archive(j)]
    if not with_archive:
        raise EvidenceInvalid(
            f"no job of pipeline {pipeline}"
            + (f" named {job_name!r}" if job_name else "")
            + " has an artifact archive; keep the bundles with `artifacts: paths: [out/]`"
        )
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=out_dir, prefix=f".pull-{pipeline}-", suffix=".partial"))
    try:
        found: list[_Found] = []
        for job in with_archive:
            archive = source.download(job, staging)
            unpacked = staging / f"job-{job.id}"
            unpack(archive, unpacked, what=f"artifacts of job {job.name!r} ({job.id})")
            archive.unlink()
            found += [_Found(job, b, b.relative_to(unpacked).as_posix()) for b in _bundles_under(unpacked)]
        if not found:
            raise EvidenceInvalid(
                f"the artifacts of pipeline {pipeline} hold no bundle (no manifest.json); "
                "did the job keep `out/` as an artifact?"
            )
        failures = []
        for item in found:
            result = verify(item.root)
            if not result.ok:
                where = f"job {item.job.name!r} ({item.job.id}), {item.relpath}"
                failures.append(f"{where}: " + "; ".join(result.describe()))
        if failures:
            raise IntegrityError(
                f"pipeline {pipeline}: {len(failures)} bundle(s) failed verification; nothing was stored: "
                + " | ".join(failures)
            )
        destinations = [
            out_dir / f"pipeline-{pipeline}" / f"{_slug(f.job.name)}-{f.job.id}" / f.root.name for f in found
        ]
        clashes = [str(d) for d in destinations if d.exists()]
        if clashes:
            raise EvidenceInvalid(
                f"already pulled: {', '.join(clashes)}; remove it or choose another --out (evidence is never overwritten)"
            )
        pulled = []
        for item, destination in zip(found, destinations, strict=True):
            _mark(item, source)
            destination.parent.mkdir(parents=True, exist_ok=True)
            item.root.rename(destination)
            manifest = json.loads((destination / MANIFEST).read_text(encoding="utf-8"))
            pulled.append(PulledBundle(destination, str(manifest["bundle_id"]), item.job.name, item.job.id))
        return pulled
    except EvidenceError:
        raise
    except OSError as exc:
        raise EvidenceError(f"cannot store the pulled evidence under {out_dir}: {exc}") from exc
    finally:
        shutil.rmtree(staging, ignore_errors=True)
