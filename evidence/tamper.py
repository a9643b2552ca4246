"""Bundles checked against the journal: what `acklab evidence verify --journal` adds to a manifest check.

A manifest alone proves only that the files match *a* manifest: someone who edits
``run.json`` and recomputes the manifest gets "intact". The journal closes that gap: when a
bundle is finalised, the journal records the sha256 of its manifest and the manifest names
the journal's newest entry (``journal_head``). So a bundle is checked for

* its manifest's sha256 being one the journal recorded for that bundle id;
* the journal still holding the entry ``journal_head`` names, with the same hash (a journal
  cut short or rewritten below the bundle);
* each trial file against the one the journal recorded when the trial finished (the first
  ``ok`` checkpoint of the file, or a rewrite recorded before the bundle was finalised);
* the journal's own hash chain (`evidence.chain`), once per journal.

Anyone who can write the evidence directory can append a chained row, so no single appended
row vouches for anything: a second finalisation is refused, a later ``ok`` checkpoint of a
file counts for nothing, a rewrite after the finalisation neither. A bundle whose manifest
says ``pulled_from`` is taken as pulled only for a ``bundle/pulled`` entry inside a pull run
of its own (`Journal.pulls`), naming that manifest and where the bundle lies — and never
when this journal saw the bundle run or finalised here (a local bundle marked "pulled").
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

from .bundle import MANIFEST, Verification
from .journal import JOURNAL_FILE, Journal, TrialCheckpoints
from .loading import EVIDENCE, DocumentError, parse_json, read_bounded


def journal_for(path: Path) -> Path:
    """The journal of the evidence directory `path` is (or holds the bundle `path`).

    A pulled bundle sits three levels below the evidence directory it was pulled into
    (``pipeline-<id>/<job>-<job id>/<bundle>``): the nearest of those directories holding a
    journal is the one."""
    path = Path(path)
    if not (path / MANIFEST).is_file():
        return path / JOURNAL_FILE
    for parent in list(path.parents)[:3]:
        if (parent / JOURNAL_FILE).is_file():
            return parent / JOURNAL_FILE
    return path.parent / JOURNAL_FILE


def _manifest(bundle: Path) -> tuple[str, dict[str, Any]] | None:
    try:
        data = read_bounded(bundle / MANIFEST, EVIDENCE, follow_symlinks=False)
        doc = parse_json(data, source=str(bundle / MANIFEST), limits=EVIDENCE)
    except DocumentError:
        return None  # verify() already says why
    return hashlib.sha256(data).hexdigest(), doc if isinstance(doc, dict) else {}


def compare(results: Iterable[Verification], journal: Journal) -> list[Verification]:
    """Each verification with what the journal says of its bundle added to it."""
    out = []
    for result in results:
        found = _manifest(result.bundle)
        if found is None:
            out.append(result)
            continue
        sha, manifest = found
        problems = _problems(sha, manifest, journal, _where(result.bundle, journal))
        out.append(replace(result, journal=result.journal + tuple(problems)) if problems else result)
    return out


def _where(bundle: Path, journal: Journal) -> str | None:
    """`bundle`'s place in the evidence directory of `journal` (None: outside it)."""
    try:
        return Path(bundle).resolve().relative_to(journal.path.resolve().parent).as_posix()
    except ValueError:
        return None


def _pulled_problems(sha: str, manifest: dict[str, Any], journal: Journal, where: str | None) -> list[str]:
    """A bundle marked ``pulled_from``: its journal stayed in the pipeline and pull verified it
    on arrival. That holds only for a bundle `evidence pull` stored here, as and where it stored
    it: the field itself is not signed, and anyone can write it."""
    bundle_id = str(manifest.get("bundle_id", ""))
    claim = f"manifest.json says the bundle was pulled from a pipeline (pulled_from), but {journal.path}"
    problems = []
    if journal.ran(bundle_id) or any(
        status == "finalised" for _, status, _ in journal.bundle_entries(bundle_id)
    ):
        problems.append(
            f"{claim} saw bundle {bundle_id!r} run or finalised here: a bundle of this evidence directory "
            "is checked against this journal, never taken as pulled (a local bundle rewritten and marked pulled)"
        )
    origin = manifest.get("pulled_from")
    pipeline = str(origin.get("pipeline")) if isinstance(origin, dict) else None
    if not any(
        p.get("manifest_sha256") == sha and p.get("path") == where and str(p.get("pipeline")) == pipeline
        for p in journal.pulls(bundle_id)
    ):
        problems.append(
            f"{claim} has no record of `acklab evidence pull` storing bundle {bundle_id!r} with this manifest "
            f"(sha256 {sha[:12]}) at {where or 'this place'} in a pull run of its own"
        )
    return problems


def _problems(sha: str, manifest: dict[str, Any], journal: Journal, where: str | None) -> list[str]:
    if "pulled_from" in manifest:
        return _pulled_problems(sha, manifest, journal, where)
    bundle_id = str(manifest.get("bundle_id", ""))
    entries = journal.bundle_entries(bundle_id)
    problems: list[str] = []
    finalised = [(entry_id, payload) for entry_id, status, payload in entries if status == "finalised"]
    head = manifest.get("journal_head")
    if not (isinstance(head, dict) and isinstance(head.get("entry"), int)):
        problems.append(
            "manifest.json names no journal_head: every bundle finalised beside a journal binds its head, "
            "so this manifest was not written by the lab"
        )
        head = None
    elif journal.entry_hash_of(head["entry"]) != head.get("sha256"):
        problems.append(
            f"the journal no longer holds entry #{head['entry']} as it was when the bundle was finalised "
            "(the journal was cut short or rewritten)"
        )
    if not finalised:
        problems.append(
            f"{journal.path} has no record of bundle {bundle_id!r} being finalised "
            "(a bundle from another evidence directory, or one the lab did not write)"
        )
        return problems
    if len(finalised) > 1:
        ids = ", ".join(f"#{entry_id}" for entry_id, _ in finalised)
        problems.append(
            f"{journal.path} records bundle {bundle_id!r} finalised {len(finalised)} times (entries {ids}); "
            "a bundle is finalised once, so a second finalisation is refused (an entry appended to vouch "
            "for a rewritten bundle)"
        )
    # Only the finalisation that follows the manifest's journal_head counts.
    after = [(entry_id, p) for entry_id, p in finalised if head is None or entry_id > head["entry"]]
    counted = after[0] if after else None
    if counted is None:
        problems.append(
            f"no finalisation of bundle {bundle_id!r} follows the manifest's journal_head "
            f"(entry #{head['entry'] if head else '?'}): the manifest was not the one finalised"
        )
    elif counted[1].get("manifest_sha256") != sha:
        recorded = str(counted[1].get("manifest_sha256"))
        problems.append(
            f"manifest.json (sha256 {sha[:12]}) is not the manifest the journal recorded when the bundle "
            f"was finalised (sha256 {recorded[:12]}): the bundle was rewritten and its manifest recomputed"
        )
    if manifest.get("kind") == "run" and journal.ran(bundle_id):
        problems += _trial_problems(manifest, journal.checkpoints(bundle_id), counted[0] if counted else None)
    return problems


def _trial_problems(
    manifest: dict[str, Any], recorded: dict[str, TrialCheckpoints], finalised: int | None
) -> list[str]:
    """Every trial file of the manifest against the sha256 the journal recorded when it was
    written — its first checkpoint, or its last rewrite before the finalisation (entry
    `finalised`) — for a run this journal saw (a merge's trials were journalled where their
    shards ran)."""
    problems = []
    files = manifest.get("files")
    for rel, entry in sorted(files.items() if isinstance(files, dict) else []):
        if not rel.startswith("trials/") or not isinstance(entry, dict):
            continue
        if rel not in recorded:
            problems.append(f"{rel}: the journal has no record of this trial file being written")
            continue
        expected = recorded[rel].expected(before=finalised if finalised is not None else 0)
        if entry.get("sha256") != expected:
            problems.append(
                f"{rel} (sha256 {str(entry.get('sha256'))[:12]}) is not the trial file the journal recorded "
                f"when the trial finished (sha256 {expected[:12]})"
            )
    return problems
