"""A sweep bundle read back for the console: its matrix, linked to the incidents of its nested runs.

`acklab sweep` writes `<sweep_id>/sweep.json` and one ordinary run bundle per target x
database inside it (`<sweep_id>/<run_id>/`). The index finds those nested bundles like any
other; this module ties the sweep's cells and runs to them. A cell's `incident` is a path
written by the harness (or by hand), so it becomes a link only when it names an incident
the index found inside this sweep: nothing in sweep.json can point a link elsewhere.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from markupsafe import Markup

from acklab.evidence.documents.sweep import SweepCell, SweepDocument
from acklab.evidence.heatmap import sweep_heatmap

from .index import Snapshot
from .links import Links
from .scan import BundleSummary

PROBLEM_LIMIT = 20


@dataclass(frozen=True)
class SweepRun:
    """One target x database of a sweep, and its nested run bundle when the index found it."""

    target: str
    database: str
    experiments: list[str]
    status: str
    verdict: str | None
    run_id: str | None
    error: str | None
    bundle: BundleSummary | None
    listed: bool = True  # False: a bundle inside the sweep that sweep.json does not list


def nested_bundles(snapshot: Snapshot, sweep: BundleSummary) -> dict[str, BundleSummary]:
    """The bundles inside a sweep's directory, by their path relative to it."""
    return {
        b.path.relative_to(sweep.path).as_posix(): b
        for b in snapshot.bundles
        if b.path != sweep.path and b.path.is_relative_to(sweep.path)
    }


def incident_href(nested: Mapping[str, BundleSummary], links: Links) -> Callable[[SweepCell], str | None]:
    """Maps a cell's `incident` (`<run>/incidents/<file>.json`) to that incident's page, or None."""

    def href(cell: SweepCell) -> str | None:
        bundle_rel, sep, name = (cell.incident or "").rpartition("/incidents/")
        found = nested.get(bundle_rel) if sep else None
        if found is None:
            return None
        incident = next((i for i in found.incidents if i.path == f"incidents/{name}"), None)
        if incident is None or not incident.incident_id:
            return None
        return links.incident(found.key, incident.incident_id)

    return href


def heatmap(doc: SweepDocument, nested: Mapping[str, BundleSummary], links: Links) -> Markup:
    """The sweep's heatmap with console links."""
    svg = sweep_heatmap(doc, href=incident_href(nested, links), declaration=False)
    # evidence.heatmap escapes every attribute value and text node, and uses presentation
    # attributes only (no style=, which the CSP refuses); its tests plant markup in names.
    return Markup(svg)  # noqa: S704  # nosec B704


def runs(doc: SweepDocument | None, nested: Mapping[str, BundleSummary]) -> list[SweepRun]:
    """The sweep's runs as sweep.json lists them, then any bundle inside the sweep it does not list."""
    out: list[SweepRun] = []
    seen: set[str] = set()
    for entry in doc.runs if doc is not None else []:
        rel = entry.bundle or ""
        seen.add(rel)
        out.append(
            SweepRun(
                target=entry.target_name or entry.target,
                database=entry.database,
                experiments=list(entry.experiments),
                status=entry.status,
                verdict=entry.verdict,
                run_id=entry.run_id,
                error=entry.error,
                bundle=nested.get(rel) if rel else None,
            )
        )
    for rel, found in sorted(nested.items()):
        if rel in seen:
            continue
        databases = sorted({i.database for i in found.incidents if i.database})
        out.append(
            SweepRun(
                target=found.run.target if found.run else "?",
                database=", ".join(databases) or "?",
                experiments=sorted({i.experiment for i in found.incidents}),
                status=found.run.status if found.run else "unknown",
                verdict=found.run.verdict if found.run else None,
                run_id=found.run.run_id if found.run else None,
                error=None,
                bundle=found,
                listed=False,
            )
        )
    return out
