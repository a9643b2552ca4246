"""The evidence index: incremental refresh, cached verification, defensive reading."""

from __future__ import annotations

import json
import os
import time

import pytest

import acklab.evidence.bundle as bundle_module
from acklab.console import index as index_module
from acklab.console import scan
from acklab.console.errors import EvidenceDirError
from acklab.console.index import FAILED, INCOMPLETE, VERIFIED, EvidenceIndex
from acklab.console.scan import bundle_key, discover, safe_id
from acklab.evidence.exitcodes import ExitCode
from tests.console.samples import make_run_bundle


def test_missing_evidence_directory_is_an_input_error(tmp_path):
    with pytest.raises(EvidenceDirError, match="does not exist") as info:
        EvidenceIndex(tmp_path / "nope")
    assert info.value.exit_code == ExitCode.INVALID_INPUT


def test_summaries_are_reused_until_a_document_changes(evidence, monkeypatch):
    calls = []
    real = scan.summarise_bundle

    def counted(root, path, *rest):
        calls.append(path)
        return real(root, path, *rest)

    monkeypatch.setattr(index_module, "summarise_bundle", counted)
    idx = EvidenceIndex(evidence, refresh_interval=0.0)
    first = idx.snapshot()
    assert len(calls) == 7
    assert idx.snapshot() is first  # nothing changed: same snapshot, nothing re-read
    assert len(calls) == 7

    run = evidence / "run-0000-live" / "run.json"
    doc = json.loads(run.read_text())
    doc["verdict"] = "error"
    run.write_text(json.dumps(doc))
    second = idx.snapshot()
    assert second is not first
    assert calls[7:] == [evidence / "run-0000-live"]
    summary = second.by_key["run-0000-live"].run
    assert summary is not None
    assert summary.verdict == "error"


def test_new_and_removed_bundles_appear_and_disappear(evidence):
    idx = EvidenceIndex(evidence, refresh_interval=0.0)
    assert "late" not in idx.snapshot().by_key
    make_run_bundle(evidence, run_id="late", target="fixture:live", experiments=("replay",), trials=1)
    assert "late" in idx.snapshot().by_key
    (evidence / "late" / "manifest.json").unlink()
    for path in sorted((evidence / "late").rglob("*"), reverse=True):
        path.rmdir() if path.is_dir() else path.unlink()
    (evidence / "late").rmdir()
    assert "late" not in idx.snapshot().by_key


def test_refresh_is_throttled(evidence):
    # a bundle that appears deep inside another leaves the directory and its journal as they
    # were: it waits for the periodic rescan
    idx = EvidenceIndex(evidence, refresh_interval=3600)
    first = idx.snapshot()
    nested = evidence / "run-0000-live" / "more"
    make_run_bundle(nested, run_id="late", target="fixture:live", experiments=("replay",), trials=1)
    assert idx.snapshot() is first
    assert "run-0000-live~more~late" in idx.snapshot(force=True).by_key


def test_the_first_request_after_a_run_sees_it(evidence):
    """A run adds its bundle to the directory and appends to the journal: the next request
    rescans at once, never answering once with what was there before the run."""
    idx = EvidenceIndex(evidence, refresh_interval=3600)
    first = idx.snapshot()
    assert idx.snapshot() is first  # nothing written: no rescan
    make_run_bundle(evidence, run_id="late", target="fixture:live", experiments=("replay",), trials=1)
    assert "late" in idx.snapshot().by_key
    after = idx.snapshot()
    (evidence / "run-0000-live" / "again").mkdir()
    make_run_bundle(evidence / "run-0000-live" / "again", run_id="later", target="fixture:live", trials=1)
    assert idx.snapshot() is after  # deep inside, unseen until the journal says a run happened
    (evidence / "journal.sqlite").write_bytes(b"one more entry")
    assert "run-0000-live~again~later" in idx.snapshot().by_key


def test_verification_is_cached_and_notices_an_edit_in_place(evidence, monkeypatch):
    idx = EvidenceIndex(evidence, refresh_interval=0.0)
    bundle = idx.snapshot().by_key["run-0000-live"]
    verified = []

    def counted(root):
        verified.append(root)
        return bundle_module.verify(root)

    monkeypatch.setattr(index_module, "verify", counted)
    assert idx.integrity(bundle).status == VERIFIED
    assert idx.integrity(bundle).status == VERIFIED
    assert len(verified) == 1

    incident = next((evidence / "run-0000-live" / "incidents").iterdir())
    data = incident.read_bytes()
    incident.write_bytes(data.replace(b'"verdict": "pass"', b'"verdict": "fail"', 1))
    st = incident.stat()
    os.utime(incident, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    integrity = idx.integrity(bundle)
    assert integrity.status == FAILED
    assert integrity.lines == (f"changed: incidents/{incident.name}",)
    assert len(verified) == 2


def test_statuses_of_the_sample_bundles(sample_evidence):
    idx = EvidenceIndex(sample_evidence)
    snap = idx.snapshot()
    statuses = {key: idx.integrity(bundle).status for key, bundle in snap.by_key.items()}
    assert statuses["run-tampered"] == FAILED
    assert statuses["run-incomplete"] == INCOMPLETE
    assert statuses["flow-0001"] == VERIFIED
    assert statuses["run-0000-unsafe"] == VERIFIED
    assert [b.key for b in snap.bundles][:2] == ["flow-0001", "run-0001-live"]  # newest first


def test_unreadable_and_odd_documents_become_problems_not_exceptions(tmp_path):
    bundle = tmp_path / "ev" / "odd"
    (bundle / "incidents").mkdir(parents=True)
    (bundle / "run.json").write_text("{not json")
    (bundle / "incidents" / "a.json").write_text(
        '{"incident_id": "../../escape", "verdict": 3, "trials": "x"}'
    )
    (bundle / "incidents" / "b.json").write_text("[1, 2]")
    snap = EvidenceIndex(tmp_path / "ev").snapshot()
    odd = snap.by_key["odd"]
    assert any("run.json: unreadable" in p for p in odd.problems)
    # not incidents the lab writes: listed by their file, with why, and with no verdict of theirs
    assert any(p.startswith("a.json: does not validate") for p in odd.problems)
    assert any(p.startswith("b.json: unreadable (is a JSON list") for p in odd.problems)
    assert sorted((i.incident_id, i.verdict) for i in odd.incidents) == [("a", "unknown"), ("b", "unknown")]


def test_an_incident_id_is_one_path_segment():
    assert safe_id("../../escape") == "i.._.._escape"  # never `..` on its own
    assert safe_id("run-1-lost-ack") == "run-1-lost-ack"


def test_discovery_finds_nested_bundles_but_not_inside_document_folders(tmp_path):
    (tmp_path / "a" / "incidents" / "deep").mkdir(parents=True)
    (tmp_path / "a" / "run.json").write_text("{}")
    (tmp_path / "a" / "incidents" / "deep" / "run.json").write_text("{}")
    (tmp_path / "sweep" / "shard-1").mkdir(parents=True)
    (tmp_path / "sweep" / "shard-1" / "manifest.json").write_text("{}")
    (tmp_path / "linked").symlink_to(tmp_path / "sweep")
    assert discover(tmp_path) == [tmp_path / "a", tmp_path / "sweep" / "shard-1"]


def test_bundle_keys_are_url_safe_and_colliding_keys_are_told_apart(tmp_path):
    assert bundle_key("sweep/shard 1") == "sweep~shard_1"
    assert bundle_key(".hidden") == "b.hidden"
    for name in ("x y", "x_y"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "run.json").write_text("{}")
    keys = sorted(EvidenceIndex(tmp_path).snapshot().by_key)
    assert keys == ["x_y", "x_y-2"]


def test_periodic_rescan_runs_in_the_background(evidence):
    idx = EvidenceIndex(evidence, refresh_interval=0.01)
    first = idx.snapshot()
    make_run_bundle(evidence, run_id="late", target="fixture:live", experiments=("replay",), trials=1)
    deadline = time.monotonic() + 10
    while "late" not in idx.snapshot().by_key:  # the old snapshot answers while the rescan runs
        assert time.monotonic() < deadline, "the background rescan never landed"
        time.sleep(0.02)
    assert idx.snapshot().generation > first.generation
