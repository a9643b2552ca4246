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

Bounded and all or nothing. Each archive is capped while it downloads (`PullCaps.download`,
also checked against the size GitLab lists before the download starts) and the whole pull is
capped on what it downloads and unpacks (`PullCaps.total`): a server that streams without
end costs no more than the cap, and exit 7 names the job. Two bundles that would be stored
under the same name are refused before anything is stored; bundles are moved into place
only when every one verified, and a failure while moving takes back the ones already moved.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import secrets
import shutil
import stat
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from acklab.evidence.bundle import MANIFEST, atomic_write, dump_json, verify
from acklab.evidence.clock import utcnow
from acklab.evidence.errors import EvidenceError, EvidenceInvalid, IntegrityError
from acklab.evidence.gitlab_source import ArtifactJob, DownloadTooLarge, GitLabAccess, PipelineArtifacts
from acklab.evidence.loading import load_evidence_json
from acklab.evidence.validate import validate

MAX_MEMBERS = 200_000


@dataclass(frozen=True)
class PullCaps:
    """How much one pull may download and unpack."""

    download: int = 1 << 30  # one artifact archive, as downloaded
    total: int = 4 << 30  # everything the pull downloads, and everything it unpacks


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


def unpack(archive: Path, into: Path, *, what: str, max_bytes: int = PullCaps.total) -> int:
    """Unpack a zip refusing absolute paths, `..`, links and more than `max_bytes` (IntegrityError).

    Returns the bytes unpacked (each member is read no further than its declared size).
    """
    try:
        with zipfile.ZipFile(archive) as zf:
            members = zf.infolist()
            size = sum(m.file_size for m in members)
            if len(members) > MAX_MEMBERS or size > max_bytes:
                raise IntegrityError(
                    f"{what}: the archive unpacks to {size:,} bytes in {len(members):,} files, more than "
                    f"this pull may unpack ({max_bytes:,} bytes, {MAX_MEMBERS:,} files); refusing it"
                )
            for member in members:
                name = PurePosixPath(member.filename)
                if name.is_absolute() or ".." in name.parts or "\\" in member.filename:
                    raise IntegrityError(
                        f"{what}: archive member {member.filename!r} points outside the archive"
                    )
                # Every part a name: no `.`, no empty part (`a//b`), no member that is the root.
                parts = (
                    member.filename.rstrip("/").split("/") if member.is_dir() else member.filename.split("/")
                )
                if not member.filename or any(part in ("", ".") for part in parts):
                    raise IntegrityError(
                        f"{what}: archive member {member.filename!r} is not a plain relative path "
                        "(a `.` or an empty part); refusing the archive"
                    )
                if stat.S_ISLNK(member.external_attr >> 16):
                    raise IntegrityError(f"{what}: archive member {member.filename!r} is a link; refusing it")
                target = into.joinpath(*name.parts)
                try:
                    if member.is_dir():
                        target.mkdir(parents=True, exist_ok=True)
                        continue
                    target.parent.mkdir(parents=True, exist_ok=True)
                    # "x" (exclusive): a second member of the same name, or a file where a
                    # folder already is, is the archive's clash, never an overwrite.
                    with zf.open(member) as src, target.open("xb") as dst:
                        shutil.copyfileobj(src, dst)
                except OSError as exc:
                    raise IntegrityError(
                        f"{what}: archive member {member.filename!r} clashes with another member "
                        f"(a file and a folder, or two files, of one name: {exc.strerror}); refusing the archive"
                    ) from exc
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, NotImplementedError) as exc:
        raise IntegrityError(f"{what}: not a sound zip archive ({exc})") from exc
    return size


def _bundles_under(root: Path) -> list[Path]:
    """The outermost bundles under `root`: a comparison's or a sweep's runs are part of it.

    Their manifests are covered by the outer manifest, so they travel with it, unmarked.
    """
    roots = sorted(p.parent for p in root.rglob(MANIFEST) if p.is_file())
    outermost: list[Path] = []
    for candidate in roots:  # sorted: a bundle comes before anything nested in it
        if not any(candidate.is_relative_to(outer) for outer in outermost):
            outermost.append(candidate)
    return outermost


def _mark(found: _Found, source: PipelineArtifacts) -> None:
    path = found.root / MANIFEST
    original = path.read_bytes()  # verified just before: bounded and no link
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


def _archived_jobs(
    source: PipelineArtifacts, pipeline: int, job_name: str | None, caps: PullCaps
) -> list[Any]:
    """The pipeline's jobs (or the one named) that have an artifact archive a pull can take."""
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
    listed = sum(j.archive_size or 0 for j in with_archive)
    too_big = [j for j in with_archive if (j.archive_size or 0) > caps.download]
    if too_big or listed > caps.total:
        names = ", ".join(f"{j.name!r} ({j.archive_size:,} bytes)" for j in too_big if j.archive_size)
        raise IntegrityError(
            f"pipeline {pipeline}: the artifacts are larger than a pull takes "
            f"({names or f'{listed:,} bytes in all'}; at most {caps.download:,} bytes an archive, "
            f"{caps.total:,} in all); nothing was downloaded"
        )
    return with_archive


def _unpacked(
    source: PipelineArtifacts, jobs: list[ArtifactJob], staging: Path, caps: PullCaps
) -> list[_Found]:
    """Every bundle of the jobs' archives, downloaded and unpacked into `staging` within the caps."""
    found: list[_Found] = []
    downloaded = unpacked_bytes = 0
    for job in jobs:
        what = f"artifacts of job {job.name!r} ({job.id})"
        budget = min(caps.download, caps.total - downloaded)
        try:
            archive = source.download(job, staging, max_bytes=budget)
        except DownloadTooLarge as exc:
            raise IntegrityError(
                f"{exc} (at most {caps.download:,} bytes an archive, {caps.total:,} in all); nothing was stored"
            ) from exc
        downloaded += archive.stat().st_size
        unpacked = staging / f"job-{job.id}"
        unpacked_bytes += unpack(archive, unpacked, what=what, max_bytes=caps.total - unpacked_bytes)
        archive.unlink()
        found += [_Found(job, b, b.relative_to(unpacked).as_posix()) for b in _bundles_under(unpacked)]
    return found


def _destinations(found: list[_Found], out_dir: Path, pipeline: int) -> list[Path]:
    """Where each verified bundle is stored; IntegrityError when two would share a name."""
    destinations = [
        out_dir / f"pipeline-{pipeline}" / f"{_slug(f.job.name)}-{f.job.id}" / f.root.name for f in found
    ]
    seen: dict[Path, _Found] = {}
    for item, destination in zip(found, destinations, strict=True):
        earlier = seen.setdefault(destination, item)
        if earlier is not item:
            raise IntegrityError(
                f"job {item.job.name!r} ({item.job.id}) holds two bundles named {item.root.name!r} "
                f"({earlier.relpath} and {item.relpath}); they would be stored under one name, so "
                "nothing was stored"
            )
    clashes = [str(d) for d in destinations if d.exists()]
    if clashes:
        raise EvidenceInvalid(
            f"already pulled: {', '.join(clashes)}; remove it or choose another --out (evidence is never overwritten)"
        )
    return destinations


def pull(
    access: GitLabAccess,
    *,
    project: str,
    pipeline: int,
    out_dir: Path,
    job_name: str | None = None,
    caps: PullCaps | None = None,
) -> list[PulledBundle]:
    """Fetch, verify and store every bundle of a pipeline's artifacts (all or nothing, bounded)."""
    caps = caps or PullCaps()
    source = PipelineArtifacts(access, project, pipeline)
    with_archive = _archived_jobs(source, pipeline, job_name, caps)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=out_dir, prefix=f".pull-{pipeline}-", suffix=".partial"))
    try:
        found = _unpacked(source, with_archive, staging, caps)
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
        destinations = _destinations(found, out_dir, pipeline)
        for item in found:
            _mark(item, source)
        stored = _store(found, destinations)
        _record(out_dir, pipeline, stored)
        return stored
    except EvidenceError:
        raise
    except OSError as exc:
        raise EvidenceError(f"cannot store the pulled evidence under {out_dir}: {exc}") from exc
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _store(found: list[_Found], destinations: list[Path]) -> list[PulledBundle]:
    """Move every bundle into place, or none: a failure takes back the ones already moved."""
    moved: list[tuple[Path, Path]] = []
    made: list[Path] = []
    try:
        for item, destination in zip(found, destinations, strict=True):
            for parent in reversed(destination.parents):
                if not parent.exists():
                    parent.mkdir()
                    made.append(parent)
            item.root.rename(destination)
            moved.append((destination, item.root))
    except OSError:
        for destination, origin in reversed(moved):
            destination.rename(origin)
        for directory in reversed(made):
            with contextlib.suppress(OSError):
                directory.rmdir()
        raise
    pulled = []
    for item, destination in zip(found, destinations, strict=True):
        manifest = load_evidence_json(destination / MANIFEST)
        pulled.append(PulledBundle(destination, str(manifest["bundle_id"]), item.job.name, item.job.id))
    return pulled


def _record(out_dir: Path, pipeline: int, pulled: list[PulledBundle]) -> None:
    """The pull in the local journal, as a run of its own (`PULL_RUN`): its start, each stored
    bundle (``bundle``/``pulled``, the sha256 of its marked manifest and where it lies), its end
    naming them. `evidence verify --journal` takes a ``pulled_from`` bundle as pulled only for a
    ``pulled`` entry inside such a run, with that manifest, at that place."""
    from acklab.evidence.journal import PULL_RUN, Journal, journal_path  # the journal imports bundle

    run_id = f"pull-{pipeline}-{secrets.token_hex(6)}"
    summary = {"pipeline": pipeline, "bundles": [bundle.bundle_id for bundle in pulled]}
    with Journal(journal_path(out_dir)) as journal:
        started = utcnow()
        journal.record(
            run_id=run_id, kind="run", name=PULL_RUN, status="started", started_at=started, payload=summary
        )
        for bundle in pulled:
            data = (bundle.path / MANIFEST).read_bytes()
            origin = json.loads(data)["pulled_from"]
            stored = {
                "manifest_sha256": hashlib.sha256(data).hexdigest(),
                "path": bundle.path.relative_to(out_dir).as_posix(),
                "pipeline": origin["pipeline"],
                "job_id": bundle.job_id,
            }
            journal.record(run_id=run_id, kind="bundle", name=bundle.bundle_id, status="pulled",
                           ended_at=origin["pulled_at"], payload=stored)  # fmt: skip
        journal.record(run_id=run_id, kind="run", name=PULL_RUN, status="ok", started_at=started,
                       ended_at=utcnow(), payload=summary)  # fmt: skip
