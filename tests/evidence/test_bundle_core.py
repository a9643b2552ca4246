import json

import pytest

from acklab.evidence.bundle import BundleWriter, find_bundles, verify
from acklab.evidence.errors import EvidenceError, EvidenceInvalid
from acklab.evidence.exitcodes import ExitCode
from acklab.evidence.validate import validate


def run_doc(run_id="r1"):
    return {
        "schema": "acklab/run/v1",
        "run_id": run_id,
        "verdict": "pass",
        "status": "complete",
        "target": "fixture:live",
        "seed": 1,
        "started_at": "2026-01-01T00:00:00Z",
        "ended_at": "2026-01-01T00:00:01Z",
        "experiments": [],
    }


def test_written_bundle_verifies_and_a_one_byte_change_is_named(tmp_path):
    writer = BundleWriter(tmp_path / "r1")
    writer.write_json("run.json", run_doc(), kind="run")
    writer.write_bytes("reports/junit.xml", b"<testsuites/>")
    root = writer.finalize(env={"CI_PIPELINE_ID": "42", "CI_JOB_TOKEN": "never-recorded"})
    manifest = json.loads((root / "manifest.json").read_text())
    assert manifest["ci"] == {"pipeline_id": "42"}
    assert set(manifest["files"]) == {"run.json", "reports/junit.xml"}
    assert verify(root).ok

    (root / "reports/junit.xml").write_bytes(b"<testsuites/ ")
    (root / "run.json").unlink()
    (root / "stray.txt").write_text("x")
    result = verify(root)
    assert not result.ok
    assert result.describe() == ["changed: reports/junit.xml", "missing: run.json", "extra: stray.txt"]


def test_invalid_document_is_not_written(tmp_path):
    writer = BundleWriter(tmp_path / "r2")
    bad = run_doc() | {"verdict": "maybe"}
    with pytest.raises(EvidenceInvalid, match="verdict") as info:
        writer.write_json("run.json", bad, kind="run")
    assert info.value.exit_code == ExitCode.INVALID_INPUT
    assert not (writer.root / "run.json").exists()


@pytest.mark.parametrize("relpath", ["../escape.json", "/abs.json", "a/../../b", "manifest.json"])
def test_writer_refuses_paths_outside_the_bundle(tmp_path, relpath):
    with pytest.raises(EvidenceError):
        BundleWriter(tmp_path / "b").write_bytes(relpath, b"{}")


def test_writer_redacts_a_registered_secret_in_every_file_it_writes(tmp_path):
    secret = "whsec_c2VjcmV0c2VjcmV0"
    writer = BundleWriter(tmp_path / "b", secrets=[secret])
    writer.write_bytes("service.log", f"GET /?k={secret} key={secret}".encode())
    writer.write_json("run.json", {**run_doc(), "target": f"t {secret}"}, kind="run")
    writer.finalize()
    for path in (tmp_path / "b").rglob("*"):
        if path.is_file():
            assert secret.encode() not in path.read_bytes(), path
    assert (tmp_path / "b" / "service.log").read_text() == "GET /?k=[redacted] key=[redacted]"
    assert verify(tmp_path / "b").ok


def test_bundle_without_manifest_is_reported_incomplete(tmp_path):
    BundleWriter(tmp_path / "b").write_json("run.json", run_doc(), kind="run")
    result = verify(tmp_path / "b")
    assert not result.ok
    assert "no manifest.json" in (result.problem or "")
    assert find_bundles(tmp_path) == [tmp_path / "b"]


def test_validation_names_the_field():
    with pytest.raises(EvidenceInvalid, match=r"at experiments/0: 'incident' is a required property"):
        validate(
            "run",
            run_doc()
            | {"experiments": [{"name": "lost-ack", "verdict": "pass", "trials": 1, "violations": []}]},
        )
