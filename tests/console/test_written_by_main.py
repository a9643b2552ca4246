"""Bundles written before the typed documents still read, verify and show.

``tests/data/written-by-main/`` was written by acklab's main branch just before the documents
became models: a run of fixture:unsafe (lost-ack, concurrent-duplicates), a comparison of
fixture:unsafe with fixture:live, and the repair flow on a sandbox (its trail and the lab
runs it made). Nothing of them may stop loading: the typed readers, ``acklab evidence
verify``, and every page of the console.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from acklab.console.index import VERIFIED, EvidenceIndex
from acklab.evidence.bundle import find_bundles, verify
from acklab.evidence.documents.base import Document
from acklab.evidence.documents.comparison import ComparisonDocument
from acklab.evidence.documents.incident import Incident
from acklab.evidence.documents.run import RunDocument
from acklab.evidence.documents.trail import CheckRecord, LabRunOutputs, StrikeComparison, TrailDocument
from acklab.evidence.documents.trial import Trial

WRITTEN = Path(__file__).resolve().parents[1] / "data" / "written-by-main"
MODELS: dict[str, type[Document]] = {
    "run.json": RunDocument,
    "comparison.json": ComparisonDocument,
    "trail.json": TrailDocument,
}


@pytest.fixture
def written(tmp_path: Path) -> Path:
    return Path(shutil.copytree(WRITTEN, tmp_path / "ev"))


def test_every_document_reads_with_its_model():
    documents = sorted(WRITTEN.rglob("*.json"))
    read = 0
    for path in documents:
        doc = json.loads(path.read_text(encoding="utf-8"))
        if path.name in MODELS:
            MODELS[path.name].read(doc, what=str(path))
        elif path.parent.name == "incidents":
            Incident.read(doc, what=str(path))
        elif path.parent.name == "trials":
            Trial.read(doc, what=str(path))
        else:
            continue
        read += 1
    assert read >= 20
    (trail_path,) = WRITTEN.glob("flow-*/trail.json")
    trail = TrailDocument.read(json.loads(trail_path.read_text(encoding="utf-8")))
    outputs = {c.name: c.outputs for c in trail.checkpoints}
    assert LabRunOutputs.within(outputs["reproduce"]) is not None
    assert LabRunOutputs.within(outputs["verify"]) is not None
    assert [CheckRecord.read(c).name for c in outputs["verify"]["checks"]] == ["pytest", "ruff", "bandit"]
    assert all(StrikeComparison.read(c).status == "held" for c in outputs["strike-again"]["experiments"])


def test_they_verify():
    bundles = find_bundles(WRITTEN)
    assert len(bundles) == 9
    assert all(verify(b).ok for b in bundles), [verify(b).describe() for b in bundles]


def test_the_console_shows_them_as_they_were_recorded(written: Path, client_for):
    index = EvidenceIndex(written)
    snapshot = index.snapshot()
    assert [(b.rel, b.problems) for b in snapshot.bundles if b.problems] == []
    assert all(index.integrity(b).status == VERIFIED for b in snapshot.bundles)
    verdicts = {
        (i.target, i.experiment, i.verdict) for i in snapshot.incidents if i.run_id.startswith("2026")
    }
    assert ("fixture:unsafe", "lost-ack", "fail") in verdicts
    assert ("fixture:live", "lost-ack", "pass") in verdicts
    client = client_for(written)
    assert client.get("/").status_code == 200
    for bundle in snapshot.bundles:
        assert client.get(f"/bundles/{bundle.key}").status_code == 200
        for incident in bundle.incidents:
            if incident.incident_id and incident.path:
                page = client.get(f"/bundles/{bundle.key}/incidents/{incident.incident_id}").text
                assert "does not validate" not in page
    (flow,) = [b for b in snapshot.bundles if b.has_trail]
    trail = client.get(f"/bundles/{flow.key}/trail").text
    assert "does not validate" not in trail
    assert "Before and after the patch" in trail
    assert set(flow.flow_runs.values()) >= {("head", "reproduce"), ("patched", "verify")}
    assert client.get("/compare").status_code == 200
