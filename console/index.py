"""The evidence index: bundle summaries cached on file signatures, verification done lazily.

With 10,000 incidents the console must answer the overview in well under 300 ms, so a
request never re-reads or re-hashes what has not changed:

* discovery and the cheap per-bundle signatures (stat of the manifest, run.json,
  trail.json and of every file in incidents/ and reports/) run at most once per
  `refresh_interval`, in a background thread; a bundle is re-summarised only when its
  signature changed;
* verification (sha256 of every file against the manifest) runs only for bundles a page
  shows, and is cached on the (mtime, size) of every file of the bundle, so an edited
  file is re-verified on the next view;
* whole documents (an incident with all its trials) are loaded on demand and cached on
  their own (mtime, size).
"""

from __future__ import annotations

import os
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any, TypeVar

from acklab.evidence.bundle import verify
from acklab.evidence.documents.base import Document

from .errors import EvidenceDirError
from .outline import Outline, OutlineError, outline
from .scan import (
    BundleSummary,
    IncidentSummary,
    bundle_key,
    cheap_signature,
    discover,
    read_json,
    summarise_bundle,
)

VERIFIED, FAILED, INCOMPLETE = "verified", "failed", "incomplete"
D = TypeVar("D", bound=Document)


@dataclass(frozen=True)
class Integrity:
    """Verification status of a bundle: verified, failed (with what differs) or incomplete."""

    status: str
    lines: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        return {VERIFIED: "verified", FAILED: "integrity warning", INCOMPLETE: "incomplete"}[self.status]


@dataclass
class Snapshot:
    """An immutable view of the index at one refresh; derived tables are computed once per snapshot."""

    generation: int
    bundles: list[BundleSummary]
    by_key: dict[str, BundleSummary]
    extras: dict[str, Any] = field(default_factory=dict)

    @cached_property
    def incidents(self) -> list[IncidentSummary]:
        """Every incident of every bundle, newest first."""
        found = [i for b in self.bundles for i in b.incidents]
        found.sort(key=lambda i: (-i.sort_time, i.bundle, i.incident_id or ""))
        return found

    def incident(self, key: str, incident_id: str) -> IncidentSummary | None:
        """The incident `incident_id` of bundle `key`, None when either is unknown."""
        bundle = self.by_key.get(key)
        if bundle is None:
            return None
        return next((i for i in bundle.incidents if i.incident_id == incident_id and i.path), None)


def full_signature(path: Path) -> tuple[tuple[str, int, int], ...]:
    """(relpath, mtime_ns, size) of every file in a bundle; symlinks included so they are noticed."""
    out: list[tuple[str, int, int]] = []
    stack = [path]
    while stack:
        directory = stack.pop()
        try:
            with os.scandir(directory) as it:
                for entry in it:
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(Path(entry.path))
                    else:
                        st = entry.stat(follow_symlinks=False)
                        rel = Path(entry.path).relative_to(path).as_posix()
                        out.append((rel, st.st_mtime_ns, st.st_size))
        except OSError:
            continue
    return tuple(sorted(out))


class EvidenceIndex:
    """Thread-safe, incrementally refreshed index of the bundles under an evidence directory."""

    def __init__(
        self, root: Path, *, refresh_interval: float = 1.0, documents: int = 128, frozen: bool = False
    ) -> None:
        """Index `root`. `frozen`: the evidence does not change while read (the static
        snapshot), so a bundle is verified once and never re-statted."""
        root = Path(root)
        if not root.is_dir():
            raise EvidenceDirError(
                f"evidence directory {str(root)!r} does not exist or is not a directory; "
                "run `acklab run --out DIR` first or pass --evidence DIR"
            )
        self.root = root.resolve()
        self.refresh_interval = float("inf") if frozen else refresh_interval
        self.frozen = frozen
        self._lock = threading.Lock()
        self._summaries: dict[Path, tuple[tuple[Any, ...], BundleSummary]] = {}
        self._integrity: dict[Path, tuple[tuple[tuple[str, int, int], ...], Integrity]] = {}
        self._documents: OrderedDict[tuple[str, int, int], tuple[Any, str | None]] = OrderedDict()
        self._models: OrderedDict[tuple[str, int, int, str], tuple[Any, str | None]] = OrderedDict()
        self._max_documents = documents
        # Incident outlines (small: spans and latencies), computed while summarising and
        # kept so the first page of a huge incident needs no second pass over it.
        self._outlines: OrderedDict[tuple[str, int, int], Outline] = OrderedDict()
        self._max_outlines = max(documents, 256)
        self._snapshot: Snapshot | None = None
        self._checked_at = 0.0
        self._refresh_lock = threading.Lock()
        self._refreshing = False
        self._stamp: tuple[tuple[int, int] | None, ...] | None = None

    def snapshot(self, *, force: bool = False) -> Snapshot:
        """The current snapshot; when older than `refresh_interval`, a rescan starts in the background.

        A request never waits for the periodic rescan (about 0.1 s per 2,000 bundles): it is
        answered from the previous snapshot while a thread builds the next one. The first
        build, a forced one and `refresh_interval=0` (tests) rescan synchronously, and so does
        the first request after a run wrote to the directory (a new bundle, a journal entry:
        `stamp()`), which would otherwise be answered once with what was there before it.
        """
        stamp = None if self.frozen else self.stamp()
        with self._lock:
            current = self._snapshot
            written = stamp is not None and stamp != self._stamp
            due = (
                current is None
                or force
                or written
                or time.monotonic() - self._checked_at >= self.refresh_interval
            )
            background = current is not None and not force and self.refresh_interval > 0 and not written
            if due and background and not self._refreshing:
                self._refreshing = True
                self._checked_at = time.monotonic()
                threading.Thread(
                    target=self._refresh_in_background, name="acklab-index-rescan", daemon=True
                ).start()
            if current is not None and (not due or background):
                return current
        return self._refresh()

    def _refresh_in_background(self) -> None:
        try:
            self._refresh()
        finally:
            with self._lock:
                self._refreshing = False

    def _refresh(self) -> Snapshot:
        with self._refresh_lock:  # one rescan at a time; requests keep reading the old snapshot
            snapshot = self._rescan()
            with self._lock:
                self._snapshot = snapshot
                self._checked_at = time.monotonic()
            return snapshot

    def stamp(self) -> tuple[tuple[int, int] | None, ...]:
        """(mtime_ns, size) of what every run changes: the evidence directory (a new bundle)
        and its journal (every run, flow and sweep appends to it). Three stat calls."""
        out: list[tuple[int, int] | None] = []
        for path in (self.root, self.root / "journal.sqlite", self.root / "journal.sqlite-wal"):
            try:
                st = path.stat()
            except OSError:
                out.append(None)
                continue
            out.append((st.st_mtime_ns, st.st_size))
        return tuple(out)

    def _rescan(self) -> Snapshot:
        if not self.frozen:
            self._stamp = self.stamp()  # before the scan: a write during it is seen next time
        previous = self._snapshot
        changed = previous is None
        seen: dict[Path, tuple[tuple[Any, ...], BundleSummary]] = {}
        for path in discover(self.root):
            sig = cheap_signature(path)
            cached = self._summaries.get(path)
            if cached is not None and cached[0] == sig:
                seen[path] = cached
                continue
            changed = True
            seen[path] = (sig, summarise_bundle(self.root, path, self.outline))
        if set(seen) != set(self._summaries):
            changed = True
        self._summaries = seen
        if not changed and previous is not None:
            return previous
        bundles = sorted((s for _, s in seen.values()), key=lambda b: (-b.sort_time, b.rel))
        by_key: dict[str, BundleSummary] = {}
        for bundle in sorted(bundles, key=lambda b: b.rel):
            base = bundle_key(bundle.rel if bundle.rel != "." else bundle.path.name)
            key, n = base, 2
            while key in by_key:  # two paths that sanitise to one key
                key, n = f"{base}-{n}", n + 1
            if key != bundle.key:
                bundle.key = key
                bundle.incidents = [replace(i, bundle=key) for i in bundle.incidents]
            by_key[key] = bundle
        generation = (previous.generation + 1) if previous else 1
        return Snapshot(generation=generation, bundles=bundles, by_key=by_key)

    def outline(self, path: Path) -> Outline:
        """An incident's outline (`console.outline`), cached on its (mtime, size); OutlineError."""
        try:
            st = path.lstat()
        except OSError as exc:
            raise OutlineError(f"is missing ({exc.strerror})") from exc
        cache_key = (str(path), st.st_mtime_ns, st.st_size)
        with self._lock:
            if cache_key in self._outlines:
                self._outlines.move_to_end(cache_key)
                return self._outlines[cache_key]
        found = outline(path)
        with self._lock:
            self._outlines[cache_key] = found
            while len(self._outlines) > self._max_outlines:
                self._outlines.popitem(last=False)
        return found

    def integrity(self, bundle: BundleSummary) -> Integrity:
        """The bundle's verification, recomputed only when one of its files changed."""
        if not os.path.lexists(bundle.path / "manifest.json"):
            return Integrity(INCOMPLETE, ("no manifest.json: the run was interrupted or is still writing",))
        with self._lock:
            cached = self._integrity.get(bundle.path)
        if cached is not None and self.frozen:
            return cached[1]
        sig = full_signature(bundle.path)
        if cached is not None and cached[0] == sig:
            return cached[1]
        result = verify(bundle.path)
        integrity = Integrity(VERIFIED) if result.ok else Integrity(FAILED, tuple(result.describe()))
        with self._lock:
            self._integrity[bundle.path] = (sig, integrity)
        return integrity

    def document(self, bundle: BundleSummary, rel: str) -> tuple[Any, str | None]:
        """A JSON document of a bundle, cached on its (mtime, size); (None, why) when unreadable."""
        path = bundle.path / rel
        try:
            st = path.lstat()  # a symlink is never followed: read_json refuses it, with the reason
        except OSError as exc:
            return None, f"{rel}: missing ({exc.strerror})"
        cache_key = (str(path), st.st_mtime_ns, st.st_size)
        with self._lock:
            if cache_key in self._documents:
                self._documents.move_to_end(cache_key)
                return self._documents[cache_key]
        loaded = read_json(path)
        with self._lock:
            self._documents[cache_key] = loaded
            while len(self._documents) > self._max_documents:
                self._documents.popitem(last=False)
        return loaded

    def model(self, bundle: BundleSummary, rel: str, model: type[D]) -> tuple[D | None, str | None]:
        """A document of a bundle read as `model` (`acklab.evidence.documents`), cached like
        `document`; (None, why) when it is unreadable or is not one."""
        path = bundle.path / rel
        try:
            st = path.lstat()
        except OSError as exc:
            return None, f"{rel}: missing ({exc.strerror})"
        cache_key = (str(path), st.st_mtime_ns, st.st_size, model.__name__)
        with self._lock:
            if cache_key in self._models:
                self._models.move_to_end(cache_key)
                found: tuple[D | None, str | None] = self._models[cache_key]
                return found
        doc, problem = self.document(bundle, rel)
        typed, wrong = model.read_or_problems(doc) if problem is None else (None, [])
        if problem is None and typed is None:
            problem = f"{rel}: not a document the lab writes ({wrong[0] if wrong else 'not an object'})"
        with self._lock:
            self._models[cache_key] = (typed, problem)
            while len(self._models) > self._max_documents:
                self._models.popitem(last=False)
        return typed, problem
