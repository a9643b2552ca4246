"""The GitLab Pages snapshot: the console's views rendered once, as relative static files.

The snapshot must work under any sub-path (https://group.gitlab.io/project/), so every link
is relative; it copies the raw files it links to, each as inert data (``.txt`` or ``.json``:
a planted ``.html`` or ``.svg`` never becomes active content on the Pages origin); every page
carries a banner saying it is a historical snapshot, with its generation time, pipeline and
commit; an incident's deliveries are split over pages of their own. It writes only inside
`--out`, refuses an `--out` that is, contains or lies inside the evidence directory, and
only replaces a directory that an earlier snapshot wrote (it carries `snapshot.json`).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from acklab.evidence.bundle import MANIFEST, load_manifest
from acklab.evidence.clock import utcnow
from acklab.evidence.documents.incident import Incident
from acklab.evidence.errors import EvidenceError

from . import details, views
from .compare import EventPair, build, near_pairs, pair_table
from .errors import OutputRefused
from .index import EvidenceIndex, Snapshot
from .links import StaticLinks
from .outline import OutlineError
from .overview import paginate
from .render import Site
from .scan import BundleSummary

STATIC_DIR = Path(__file__).parent / "static"
MARKER = "snapshot.json"


@dataclass(frozen=True)
class SnapshotResult:
    """What a snapshot build wrote."""

    out: Path
    pages: int
    raw_files: int
    seconds: float


def check_output(evidence: Path, out: Path) -> None:
    """Refuse an output directory that would overwrite, contain or nest inside the evidence."""
    ev, dest = evidence.resolve(), out.resolve()
    if dest == ev or ev.is_relative_to(dest) or dest.is_relative_to(ev):
        raise OutputRefused(
            f"--out {str(out)!r} equals, contains or lies inside the evidence directory {str(evidence)!r}; "
            "choose a separate directory such as public/"
        )
    if dest.exists() and not dest.is_dir():
        raise OutputRefused(f"--out {str(out)!r} exists and is not a directory")
    if dest.is_dir() and any(dest.iterdir()) and not (dest / MARKER).is_file():
        raise OutputRefused(
            f"--out {str(out)!r} is not empty and was not written by `acklab pages` (no {MARKER}); "
            "remove it or choose an empty directory"
        )


def check_docs(docs: Path) -> None:
    """A documentation site to publish must be a built one: a directory with an index.html."""
    if not (docs / "index.html").is_file() or docs.is_symlink():
        raise OutputRefused(
            f"--docs {str(docs)!r} is not a built site (no index.html in it); "
            "build it first, e.g. `mkdocs build --strict -d site`, then pass --docs site"
        )


def _copy_docs(writer: Writer, docs: Path) -> None:
    """Every regular file of the built site under docs/ (symlinks are never followed)."""
    root = docs.resolve()
    for directory, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not Path(directory, d).is_symlink()]
        for name in files:
            path = Path(directory, name)
            if path.is_symlink() or not path.is_file():
                continue
            shutil.copyfile(path, writer.target("docs/" + path.relative_to(root).as_posix()))


def site_for(snapshot: Snapshot, evidence: Path, env: Mapping[str, str]) -> Site:
    """The banner: CI variables when building in a pipeline, else the newest manifest's CI
    metadata, else the commit the newest bundle's incidents were run at (a run outside CI)."""
    newest = next((b.ci for b in snapshot.bundles if b.ci), {})
    recorded = (
        i.commit
        for b in snapshot.bundles  # newest first
        for i in b.incidents
        if i.commit
    )
    return Site(
        static=True,
        evidence=evidence.name,
        generated_at=utcnow(),
        pipeline=env.get("CI_PIPELINE_ID") or newest.get("pipeline_id"),
        commit=env.get("CI_COMMIT_SHA") or newest.get("commit_sha") or next(recorded, None),
    )


class Writer:
    """Writes files strictly inside the output directory."""

    def __init__(self, out: Path) -> None:
        self.out = out.resolve()
        self.pages = 0
        self.raw = 0
        self._made: set[Path] = set()

    def target(self, rel: str) -> Path:
        path = (self.out / rel).resolve()
        if not path.is_relative_to(self.out):  # ids are sanitised upstream; this is the last guard
            raise OutputRefused(f"refusing to write {rel!r}: it would land outside {self.out}")
        if path.parent not in self._made:  # thousands of files share a few hundred folders
            path.parent.mkdir(parents=True, exist_ok=True)
            self._made.add(path.parent)
        return path

    def page(self, rel: str, html: str | None) -> None:
        if html is not None:
            self.target(rel).write_text(html, encoding="utf-8")
            self.pages += 1

    def copy(self, source: Path, rel: str) -> None:
        shutil.copyfile(source, self.target(rel))
        self.raw += 1


def _copy_bundle(writer: Writer, bundle: BundleSummary) -> None:
    """Every regular file of the bundle (never a symlink, never anything outside it): of a
    finalised bundle, its manifest and the files it lists; never a temporary file (``.*.tmp``)."""
    root = bundle.path.resolve()
    try:
        listed: set[str] | None = {MANIFEST, *load_manifest(root)["files"]}
    except EvidenceError:
        listed = None  # an interrupted bundle: what it holds, leftovers aside
    for directory, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not Path(directory, d).is_symlink()]
        for name in files:
            path = Path(directory, name)
            if path.is_symlink() or not path.is_file() or (name.startswith(".") and name.endswith(".tmp")):
                continue
            rel = path.relative_to(root).as_posix()
            if listed is None or rel in listed:
                writer.copy(path, StaticLinks.raw_file(bundle.key, rel))


def _ctx(index: EvidenceIndex, snapshot: Snapshot, site: Site, page: str) -> views.Context:
    return views.Context(index, snapshot, StaticLinks(page), site)


def _bundle_pages(
    writer: Writer, index: EvidenceIndex, snapshot: Snapshot, site: Site, bundle: BundleSummary
) -> None:
    key = bundle.key
    pages: list[tuple[str, Callable[[views.Context, str], str | None]]] = [
        (StaticLinks.pipeline_file(key), views.pipeline),
        (StaticLinks.trail_file(key), details.trail),
    ]
    for rel, render in pages:
        writer.page(rel, render(_ctx(index, snapshot, site, rel), key))
    for page in range(1, paginate(bundle.incidents, 1, views.INCIDENTS_PER_PAGE).pages + 1):
        rel = StaticLinks.bundle_file(key, page)
        writer.page(rel, views.bundle(_ctx(index, snapshot, site, rel), key, page))
    for incident in bundle.incidents:
        if incident.incident_id and incident.path:
            try:
                count = details.incident_pages(index.outline(bundle.path / incident.path))
            except OutlineError:
                count = 1  # the page says why the incident cannot be read
            for page in range(1, count + 1):
                rel = StaticLinks.incident_file(key, incident.incident_id, page)
                ctx = _ctx(index, snapshot, site, rel)
                writer.page(rel, details.incident(ctx, key, incident.incident_id, page))
    _copy_bundle(writer, bundle)


def _compare_pages(writer: Writer, index: EvidenceIndex, snapshot: Snapshot, site: Site) -> None:
    pairs = pair_table(snapshot)
    for page in range(1, paginate(pairs, 1).pages + 1):
        rel = StaticLinks.compare_index_file(page)
        writer.page(rel, details.compare_index(_ctx(index, snapshot, site, rel), page))
    for pair in pairs + near_pairs(snapshot):
        left = index.model(snapshot.by_key[pair.left.bundle], pair.left.path or "", Incident)
        right = index.model(snapshot.by_key[pair.right.bundle], pair.right.path or "", Incident)
        events = build(pair, left, right, event=None, step=None).events or [EventPair(None, None)]
        rel = StaticLinks.compare_entry_file(pair.slug)
        writer.page(
            rel, details.compare(_ctx(index, snapshot, site, rel), pair.left_ref, pair.right_ref, None, None)
        )
        for n, event in enumerate(events):
            rel = StaticLinks.compare_file(pair.slug, n)
            ctx = _ctx(index, snapshot, site, rel)
            writer.page(rel, details.compare(ctx, pair.left_ref, pair.right_ref, event.key or None, None))


def build_snapshot(
    evidence: Path, out: Path, *, env: Mapping[str, str] | None = None, docs: Path | None = None
) -> SnapshotResult:
    """Render every view of the evidence directory into `out` as a static site; `docs`, a
    built documentation site, is published beside it under docs/ (the header links it)."""
    started = time.perf_counter()
    env = os.environ if env is None else env
    index = EvidenceIndex(evidence, frozen=True)
    check_output(evidence, out)
    if docs is not None:
        check_docs(docs)
    snapshot = index.snapshot()
    site = replace(site_for(snapshot, evidence, env), docs=docs is not None)
    if out.is_dir():
        shutil.rmtree(out)  # only a directory an earlier snapshot wrote (check_output saw its marker)
    out.mkdir(parents=True)
    writer = Writer(out)
    for name in sorted(p.name for p in STATIC_DIR.iterdir() if p.is_file()):
        shutil.copyfile(STATIC_DIR / name, writer.target(f"static/{name}"))
    runs = paginate(snapshot.bundles, 1)
    for page in range(1, runs.pages + 1):
        rel = StaticLinks.overview_file(page)
        writer.page(rel, views.overview(_ctx(index, snapshot, site, rel), page))
        rel = StaticLinks.pipelines_file(page)
        writer.page(rel, views.pipelines(_ctx(index, snapshot, site, rel), page))
    rel = StaticLinks.history_file()
    writer.page(rel, views.history_view(_ctx(index, snapshot, site, rel)))
    for bundle in snapshot.bundles:
        _bundle_pages(writer, index, snapshot, site, bundle)
    _compare_pages(writer, index, snapshot, site)
    marker = {
        "schema": "acklab/pages-snapshot/v1",
        "generated_at": site.generated_at,
        "pipeline": site.pipeline,
        "commit": site.commit,
        "bundles": len(snapshot.bundles),
        "pages": writer.pages,
    }
    if docs is not None:
        _copy_docs(writer, docs)
    writer.target(MARKER).write_text(json.dumps(marker, indent=2) + "\n", encoding="utf-8")
    return SnapshotResult(out, writer.pages, writer.raw, time.perf_counter() - started)
