"""Bundles: one directory per run, sweep or flow run, with a sha256 manifest of every file.

Layout (docs/evidence.md): `manifest.json`, `run.json`, `incidents/*.json`, `trials/*.json`,
`reports/`, and `trail.json` for a repair flow run. Every JSON document is validated before
it is written; every file is written atomically (temporary file, fsync, rename), so a killed
writer leaves either the old file or the new one, never half of one. The manifest is written
last: a bundle without one is incomplete (an interrupted run), and `verify` says so.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from . import manifest_signature
from .clock import utcnow
from .errors import EvidenceError, IntegrityError
from .journal import JOURNAL_FILE, Journal
from .loading import DocumentError, load_evidence_json
from .redaction import Redactor, known
from .validate import validate

if TYPE_CHECKING:
    from .documents.base import Document

MANIFEST = "manifest.json"
CI_VARIABLES = {
    "pipeline_id": "CI_PIPELINE_ID",
    "job_id": "CI_JOB_ID",
    "job_name": "CI_JOB_NAME",
    "commit_sha": "CI_COMMIT_SHA",
    "merge_request_iid": "CI_MERGE_REQUEST_IID",
    "project_path": "CI_PROJECT_PATH",
    "pipeline_url": "CI_PIPELINE_URL",
}


def acklab_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("acklab")
    except PackageNotFoundError:  # pragma: no cover - bare checkout
        return "0+unknown"


def ci_metadata(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """GitLab's predefined CI variables that are present (none outside a pipeline)."""
    env = os.environ if env is None else env
    return {key: env[var] for key, var in CI_VARIABLES.items() if env.get(var)}


def sha256_file(path: Path) -> str:
    """sha256 of a regular file; a symlink is refused (OSError ELOOP), never followed."""
    digest = hashlib.sha256()
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    with os.fdopen(fd, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 16), b""):
            digest.update(chunk)
    return digest.hexdigest()


def atomic_write(path: Path, data: bytes) -> None:
    """Write `data` to `path` so that a crash leaves the old content or the new, never a mix."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def dump_json(doc: Any) -> bytes:
    return (json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8")


def safe_relpath(relpath: str) -> PurePosixPath:
    """A bundle-relative path, refusing absolute paths and `..` (the manifest may not point outside)."""
    rel = PurePosixPath(relpath)
    if rel.is_absolute() or not rel.parts or any(part in ("..", "") for part in rel.parts):
        raise EvidenceError(f"bundle path {relpath!r} must be relative and stay inside the bundle")
    return rel


@dataclass
class BundleWriter:
    """Writes one bundle. Every byte it writes is redacted: the `secrets` given here and every
    secret the process has learned (`acklab.evidence.redaction`) become ``[redacted]``."""

    root: Path
    kind: str = "run"
    secrets: list[str] = field(default_factory=list, repr=False)
    # defaults to the directory's name; given when a bundle is staged under another name
    bundle_id: str = ""

    def __post_init__(self) -> None:
        self.root = Path(self.root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.bundle_id = self.bundle_id or self.root.name

    @property
    def redactor(self) -> Redactor:
        """The redaction every write goes through (read at each write: secrets learned late count)."""
        return known(self.secrets)

    def _write(self, relpath: str, data: bytes) -> Path:
        rel = safe_relpath(relpath)
        if str(rel) == MANIFEST:
            raise EvidenceError("manifest.json is written by finalize() only")
        path = self.root / rel
        atomic_write(path, data)
        return path

    def write_bytes(self, relpath: str, data: bytes) -> Path:
        """Write `data` (a report, a log, a diff) with every secret redacted."""
        return self._write(relpath, self.redactor.data(data))

    def write_text(self, relpath: str, text: str) -> Path:
        """Write `text` as UTF-8 with every secret redacted."""
        return self._write(relpath, self.redactor.text(text).encode("utf-8"))

    def write_json(self, relpath: str, doc: Any, *, kind: str | None) -> Path:
        """Redact, validate `doc` as `kind` (when given) and write it; nothing is written if it is invalid."""
        doc = self.redactor.doc(doc)
        if kind is not None:
            validate(kind, doc, what=relpath)
        return self._write(relpath, dump_json(doc))

    def document_bytes(self, relpath: str, doc: Document) -> bytes:
        """What `write_document` would write for `doc` (dumped, redacted, validated), unwritten."""
        kind = doc.SCHEMA
        if not kind or "#" in kind:
            raise EvidenceError(f"{relpath}: a {type(doc).__name__} is part of a document, not one")
        data = self.redactor.doc(doc.dump())
        validate(kind, data, what=relpath)
        return dump_json(data)

    def write_prepared(self, relpath: str, data: bytes) -> Path:
        """Write bytes `document_bytes` made (already redacted and validated), atomically."""
        return self._write(relpath, data)

    def write_document(self, relpath: str, doc: Document) -> Path:
        """Write a typed document (`acklab.evidence.documents`): dumped, redacted, validated as its kind."""
        kind = doc.SCHEMA
        if not kind or "#" in kind:
            raise EvidenceError(f"{relpath}: a {type(doc).__name__} is part of a document, not one")
        return self.write_json(relpath, doc.dump(), kind=kind)

    def finalize(
        self, *, env: Mapping[str, str] | None = None, extra: Mapping[str, Any] | None = None
    ) -> Path:
        """Write `manifest.json` over every other file in the bundle; return the bundle path.

        When the evidence directory holding the bundle has a journal, the manifest binds the
        journal's newest entry (``journal_head``) and the journal records the manifest's
        sha256 (``bundle``/``finalised``): each vouches for the other after the fact. With
        ``ACKLAB_MANIFEST_KEY`` set, the manifest is signed (`evidence.manifest_signature`).
        """
        remove_leftovers(self.root)
        manifest: dict[str, Any] = {
            "schema": "acklab/manifest/v1",
            "bundle_id": self.bundle_id,
            "kind": self.kind,
            "created_at": utcnow(),
            "acklab_version": acklab_version(),
            "ci": ci_metadata(env),
            "files": file_table(self.root),
        }
        manifest.update(extra or {})
        manifest = self.redactor.doc(manifest)
        journal_file = self.root.parent / JOURNAL_FILE
        journal = Journal(journal_file, secrets=self.secrets) if journal_file.is_file() else None
        try:
            head = journal.head() if journal is not None else None
            if head is not None:
                manifest["journal_head"] = {"entry": head[0], "sha256": head[1]}
            key = manifest_signature.signing_key()
            if key is not None:
                manifest["signature"] = manifest_signature.sign(manifest, key)
            validate("manifest", manifest, what=f"{self.bundle_id}/{MANIFEST}")
            data = dump_json(manifest)
            atomic_write(self.root / MANIFEST, data)
            if journal is not None:
                journal.record(
                    run_id=self.bundle_id,
                    kind="bundle",
                    name=self.bundle_id,
                    status="finalised",
                    ended_at=manifest["created_at"],
                    payload={
                        "manifest_sha256": hashlib.sha256(data).hexdigest(),
                        "bundle": self.root.name,
                        "kind": self.kind,
                    },
                )
        finally:
            if journal is not None:
                journal.close()
        return self.root


def _walk(root: Path) -> tuple[list[str], list[str], list[str]]:
    """(regular files, symbolic links, anything else: FIFOs, sockets, devices) under `root` as
    sorted posix paths; links are never followed, nothing is opened."""
    files: list[str] = []
    links: list[str] = []
    others: list[str] = []
    stack = [root]
    while stack:
        directory = stack.pop()
        with os.scandir(directory) as entries:
            for entry in entries:
                rel = Path(entry.path).relative_to(root).as_posix()
                if entry.is_symlink():
                    links.append(rel)
                elif entry.is_dir(follow_symlinks=False):
                    stack.append(Path(entry.path))
                elif entry.is_file(follow_symlinks=False):
                    files.append(rel)
                else:
                    others.append(rel)
    return sorted(files), sorted(links), sorted(others)


def _is_leftover(rel: str) -> bool:
    name = PurePosixPath(rel).name
    return name.startswith(".") and name.endswith(".tmp")


def bundle_files(root: Path) -> Iterable[str]:
    """Every regular file of a bundle except its manifest and leftover temporary files, as posix paths."""
    files, _, _ = _walk(Path(root))
    return [rel for rel in files if rel != MANIFEST and not _is_leftover(rel)]


def bundle_links(root: Path) -> list[str]:
    """Every symbolic link in a bundle (a bundle the lab writes holds none)."""
    return _walk(Path(root))[1]


def remove_leftovers(root: Path) -> None:
    """Remove the temporary files a killed writer left (``.<name>.*.tmp``, regular files only):
    a finalised bundle holds none, and `verify` reports one as unexpected."""
    files, _, _ = _walk(Path(root))
    for rel in files:
        if _is_leftover(rel):
            (Path(root) / rel).unlink(missing_ok=True)


def file_table(root: Path) -> dict[str, dict[str, Any]]:
    return {
        rel: {"sha256": sha256_file(root / rel), "size": (root / rel).stat().st_size}
        for rel in bundle_files(root)
    }


@dataclass(frozen=True)
class Verification:
    """The result of checking a bundle against its manifest."""

    bundle: Path
    changed: tuple[str, ...] = ()
    missing: tuple[str, ...] = ()
    extra: tuple[str, ...] = ()
    problem: str | None = None
    # Symbolic links anywhere in the bundle: the lab writes none, and nothing follows them.
    links: tuple[str, ...] = ()
    # Disagreements with the journal or the manifest's signature (`evidence.tamper`).
    journal: tuple[str, ...] = ()
    signature: str | None = None
    # Entries the lab never leaves in a finished bundle: FIFOs, sockets, devices, and the
    # temporary files of an interrupted write (``.*.tmp``) — each with why.
    unexpected: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not (
            self.changed
            or self.missing
            or self.extra
            or self.problem
            or self.links
            or self.journal
            or self.signature
            or self.unexpected
        )

    def describe(self) -> list[str]:
        lines = [f"changed: {p}" for p in self.changed]
        lines += [f"missing: {p}" for p in self.missing]
        lines += [f"extra: {p}" for p in self.extra]
        lines += [f"symlink: {p} (a bundle holds no links; acklab never follows one)" for p in self.links]
        lines += [f"unexpected: {what}" for what in self.unexpected]
        lines += [f"journal: {why}" for why in self.journal]
        if self.signature:
            lines.append(f"signature: {self.signature}")
        if self.problem:
            lines.append(self.problem)
        return lines


def load_manifest(root: Path) -> dict[str, Any]:
    """The bundle's manifest, read bounded and never through a link (IntegrityError, exit 7)."""
    path = Path(root) / MANIFEST
    if path.is_symlink():
        raise IntegrityError(f"{path} is a symbolic link; a manifest must be the bundle's own file")
    if not path.is_file():
        raise IntegrityError(f"{root}: no {MANIFEST} (an incomplete or interrupted bundle?)")
    try:
        manifest = load_evidence_json(path)
    except DocumentError as exc:
        raise IntegrityError(f"unreadable manifest: {exc}") from exc
    validate("manifest", manifest, what=str(path))
    return manifest  # type: ignore[no-any-return]


def verify(root: Path) -> Verification:
    """Compare every file of the bundle with the manifest's sha256 and size; links are failures."""
    root = Path(root)
    if root.is_symlink():
        return Verification(bundle=root, problem=f"{root} is a symbolic link; acklab does not follow it")
    try:
        files, links, others = _walk(root)
    except OSError as exc:
        return Verification(bundle=root, problem=f"{root}: cannot list the bundle: {exc.strerror}")
    unexpected = tuple(
        [f"{rel} (not a regular file or directory; nothing reads it)" for rel in others]
        + [f"{rel} (a temporary file: a finished bundle holds none)" for rel in files if _is_leftover(rel)]
    )
    try:
        manifest = load_manifest(root)
    except EvidenceError as exc:
        return Verification(bundle=root, problem=str(exc), links=tuple(links), unexpected=unexpected)
    expected: dict[str, dict[str, Any]] = manifest["files"]
    present = {rel for rel in files if rel != MANIFEST and not _is_leftover(rel)}
    changed = []
    for rel, entry in sorted(expected.items()):
        if rel not in present:
            continue
        try:
            if sha256_file(root / rel) != entry["sha256"]:
                changed.append(rel)
        except OSError:  # replaced by a link or removed while verifying
            changed.append(rel)
    missing = sorted(set(expected) - present - set(links))
    extra = sorted(present - set(expected))
    return Verification(
        bundle=root,
        changed=tuple(changed),
        missing=tuple(missing),
        extra=tuple(extra),
        links=tuple(links),
        signature=manifest_signature.check(manifest, manifest_signature.signing_key()),
        unexpected=unexpected,
    )


def find_bundles(evidence_dir: Path) -> list[Path]:
    """Every bundle (a directory holding manifest.json or run.json) under an evidence directory."""
    evidence_dir = Path(evidence_dir)
    found = {p.parent for p in evidence_dir.rglob(MANIFEST)} | {
        p.parent for p in evidence_dir.rglob("run.json")
    }
    found |= {p.parent for p in evidence_dir.rglob("trail.json")}
    return sorted(found)
