"""Bundles checked against the journal: what `acklab evidence verify --journal` adds to a manifest check.

A manifest alone proves only that the files match *a* manifest: someone who edits
``run.json`` and recomputes the manifest gets "intact". The journal closes that gap: when a
bundle is finalised, the journal records the sha256 of its manifest and the manifest names
the journal's newest entry (``journal_head``). So a bundle is checked for

* its manifest's sha256 being one the journal recorded for that bundle id;
* the journal still holding the entry ``journal_head`` names, with the same hash (a journal
  cut short or rewritten below the bundle);
* the journal's own hash chain (`evidence.chain`), once per journal.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

from .bundle import MANIFEST, Verification
from .journal import JOURNAL_FILE, Journal
from .loading import EVIDENCE, DocumentError, parse_json, read_bounded


def journal_for(path: Path) -> Path:
    """The journal of the evidence directory `path` is (or holds the bundle `path`)."""
    path = Path(path)
    return path.parent / JOURNAL_FILE if (path / MANIFEST).is_file() else path / JOURNAL_FILE


def _manifest(bundle: Path) -> tuple[str, dict[str, Any]] | None:
    try:
        data = read_bounded(bundle / MANIFEST, EVIDENCE, follow_symlinks=False)
        doc = parse_json(data, source=str(bundle / MANIFEST), limits=EVIDENCE)
    except DocumentError:
        return None  # verify() already says why
    return hashlib.sha256(data).hexdigest(), doc if isinstance(doc, dict) else {}


def compare(results: Iterable[Verification], journal: Journal) -> list[Verification]:
    """Each verification with what the journal says of its bundle added to it."""
    recorded = journal.finalised_bundles()
    out = []
    for result in results:
        found = _manifest(result.bundle)
        if found is None:
            out.append(result)
            continue
        sha, manifest = found
        bundle_id = str(manifest.get("bundle_id", ""))
        problems: list[str] = []
        hashes = [str(r.get("manifest_sha256")) for r in recorded.get(bundle_id, [])]
        if "pulled_from" in manifest:
            pass  # pulled from a pipeline: its journal stayed there; pull verified it on arrival
        elif not hashes:
            problems.append(
                f"{journal.path} has no record of bundle {bundle_id!r} being finalised "
                "(a bundle from another evidence directory, or one the lab did not write)"
            )
        elif sha not in hashes:
            problems.append(
                f"manifest.json (sha256 {sha[:12]}) is not the manifest the journal recorded when the bundle "
                f"was finalised (sha256 {hashes[-1][:12]}): the bundle was rewritten and its manifest recomputed"
            )
        head = manifest.get("journal_head")
        if isinstance(head, dict) and isinstance(head.get("entry"), int):
            now = journal.entry_hash_of(head["entry"])
            if now != head.get("sha256"):
                problems.append(
                    f"the journal no longer holds entry #{head['entry']} as it was when the bundle was finalised "
                    "(the journal was cut short or rewritten)"
                )
        out.append(replace(result, journal=result.journal + tuple(problems)) if problems else result)
    return out
