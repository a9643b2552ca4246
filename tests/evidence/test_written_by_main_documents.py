"""The typed builders write what main's dict builders wrote, for the bundles main wrote.

``tests/data/written-by-main/`` holds runs written by acklab's main branch just before the
documents became models. Rebuilding them with the models must give the same documents:
the same ``--json`` object (field for field), the same incident from the same trials, the
same run.json entry from that incident. The one figure allowed to move is the latency p50
(main computed a mean of the two middle values in one place and nearest rank in another;
now every p50 is nearest rank), and the p95, which is nearest rank too.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from acklab.evidence.documents.incident import Incident
from acklab.evidence.documents.result import RunResultJson
from acklab.evidence.documents.run import RunDocument, RunExperiment

WRITTEN = Path(__file__).resolve().parents[1] / "data" / "written-by-main"
RUNS = sorted(WRITTEN.rglob("run.json"))


def main_design_json(run: Mapping[str, Any], bundle: str) -> dict[str, Any]:
    """main's ``acklab run --json`` builder (harness/engine/documents.py before the models), verbatim."""
    keys = ("invariant", "event_id", "observed", "expected", "detail")
    errors = [f"{e['name']}: {e['reason']}" for e in run["experiments"] if e["verdict"] == "error"]
    return {
        "run_id": run["run_id"],
        "verdict": run["verdict"],
        "target": run["target"],
        "error": "; ".join(errors)[:4000] or "nothing was judged" if run["verdict"] == "error" else None,
        "experiments": [
            {
                "name": e["name"],
                "verdict": e["verdict"],
                "trials": e["trials"],
                "reason": e.get("reason", e.get("error")),
                "fault_landed": e.get("fault_landed", 0),
                "violations": [{k: v[k] for k in (*keys, "delivery") if k in v} for v in e["violations"]],
                "incident": f"{bundle}/{e['incident']}" if e["incident"] else None,
                **({"skipped_variants": e["skipped_variants"]} if e.get("skipped_variants") else {}),
            }
            for e in run["experiments"]
        ],
        "bundle": bundle,
    }


def load(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def test_the_json_object_is_the_one_main_printed():
    assert len(RUNS) >= 6
    for path in RUNS:
        doc, bundle = load(path), str(path.parent)
        typed = RunResultJson.of(RunDocument.read(doc), bundle).dump()
        assert typed == main_design_json(doc, bundle), path


def test_incidents_and_run_entries_rebuild_as_main_wrote_them():
    rebuilt = 0
    for path in RUNS:
        run = load(path)
        for entry in run["experiments"]:
            if not entry["incident"]:
                continue
            written = load(path.parent / entry["incident"])
            read = Incident.read(written)
            again = Incident.build(
                run_id=read.run_id,
                target=read.target,
                experiment=read.experiment,
                seed=read.seed,
                invariants=read.invariants,
                trials=read.trials,
                boundary=read.boundary,
                created_at=read.created_at,
            ).dump()
            figures, main_figures = again["summary"].pop("latency_ms"), written["summary"].pop("latency_ms")
            assert again == written, path.parent / entry["incident"]
            assert figures.keys() == main_figures.keys()
            assert figures.get("max") == main_figures.get("max")
            assert RunExperiment.of_incident(read, entry["incident"]).dump() == entry
            rebuilt += 1
    assert rebuilt >= 8
