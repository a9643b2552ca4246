import json
import shutil
import xml.etree.ElementTree as ET

import pytest

from acklab.evidence.bundle import verify
from acklab.evidence.errors import IntegrityError
from acklab.evidence.merge import merge
from acklab.evidence.validate import validate
from tests.evidence.factories import write_run_bundle


@pytest.fixture
def shards(tmp_path):
    s1 = write_run_bundle(tmp_path / "jobs/1/r1", "r1", {"lost-ack": [(0, "pass"), (2, "pass")]}, shard="1/2")
    s2 = write_run_bundle(
        tmp_path / "jobs/2/r1",
        "r1",
        {"lost-ack": [(1, "fail"), (3, "pass")], "replay": [(0, "pass")]},
        shard="2/2",
    )
    return s1, s2


def read(path):
    return json.loads(path.read_text())


def test_shards_merge_into_one_verified_bundle_with_recomputed_incidents(tmp_path, shards):
    s1, s2 = shards
    merged = merge([s1, s2], tmp_path / "merged")
    assert merged == tmp_path / "merged" / "r1"
    assert verify(merged).ok

    manifest = read(merged / "manifest.json")
    assert manifest["kind"] == "merged"
    assert manifest["bundle_id"] == "r1"
    assert [m.split("@")[0] for m in manifest["merged_from"]] == ["r1", "r1"]
    assert all(m.split("@sha256:")[1] for m in manifest["merged_from"])
    assert sorted(p.name for p in (merged / "sources").iterdir()) == ["r1.manifest.json"]

    trials = sorted(p.name for p in (merged / "trials").iterdir())
    assert trials == [f"lost-ack-000{i}.json" for i in range(4)] + ["replay-0000.json"]

    incident = read(merged / "incidents/lost-ack.json")
    validate("incident", incident)
    assert [t["index"] for t in incident["trials"]] == [0, 1, 2, 3]
    # recomputed by the incident builder the harness uses: the same summary a run would write
    assert incident["summary"] | {"latency_ms": None} == {
        "trials": 4,
        "passed": 3,
        "failed": 1,
        "errors": 0,
        "fault_landed": 0,
        "reason": None,
        "latency_ms": None,
    }
    assert incident["summary"]["latency_ms"]["max"] == 13.0
    assert incident["verdict"] == "fail"
    assert [v["trial"] for v in incident["violations"]] == ["lost-ack-0001"]
    # an incident only one shard held is kept byte for byte
    assert (merged / "incidents/replay.json").read_bytes() == (s2 / "incidents/replay.json").read_bytes()

    run = read(merged / "run.json")
    assert (run["verdict"], run["status"], run["shard"]) == ("fail", "complete", None)
    assert {e["name"]: (e["verdict"], e["trials"]) for e in run["experiments"]} == {
        "lost-ack": ("fail", 4),
        "replay": ("pass", 1),
    }
    junit = ET.fromstring((merged / "reports/junit.xml").read_bytes())
    cases = {c.get("name"): c for c in junit.iter("testcase")}
    assert cases["lost-ack"].find("failure") is not None
    assert cases["replay"].find("failure") is None


def test_the_same_shard_twice_is_merged_without_duplicates(tmp_path, shards):
    s1, _ = shards
    copy = tmp_path / "again" / "r1"
    shutil.copytree(s1, copy)
    merged = merge([s1, copy, s1], tmp_path / "m")
    incident = read(merged / "incidents/lost-ack.json")
    assert [t["trial_id"] for t in incident["trials"]] == ["lost-ack-0000", "lost-ack-0002"]
    run = read(merged / "run.json")
    assert (run["status"], run["verdict"]) == ("interrupted", "error")  # shard 2/2 is missing


def test_a_trial_recorded_differently_by_two_shards_is_refused(tmp_path, shards):
    s1, _ = shards
    other = write_run_bundle(tmp_path / "other/r1", "r1", {"lost-ack": [(0, "fail")]}, shard="2/2")
    with pytest.raises(IntegrityError, match="lost-ack-0000") as info:
        merge([s1, other], tmp_path / "m")
    assert info.value.exit_code == 7
    assert not (tmp_path / "m").exists() or list((tmp_path / "m").iterdir()) == []


def test_a_tampered_shard_stops_the_merge_before_anything_is_written(tmp_path, shards, acklab):
    s1, s2 = shards
    path = s2 / "trials/lost-ack-0001.json"
    path.write_text(path.read_text().replace('"fail"', '"pass"'))
    code, _, err = acklab("evidence", "merge", s1, s2, "--out", tmp_path / "m")
    assert code == 7
    assert "changed: trials/lost-ack-0001.json" in err
    assert str(s2) in err
    assert not (tmp_path / "m").exists() or list((tmp_path / "m").iterdir()) == []


def test_cli_merges_evidence_directories_and_prints_the_bundle(tmp_path, shards, acklab):
    code, out, _ = acklab("evidence", "merge", tmp_path / "jobs", "--out", tmp_path / "m", "--run-id", "all")
    assert code == 0
    assert out.strip() == str(tmp_path / "m" / "all")
    assert read(tmp_path / "m/all/run.json")["run_id"] == "all"
    code, _, err = acklab("evidence", "merge", tmp_path / "jobs", "--out", tmp_path / "m", "--run-id", "all")
    assert code == 3
    assert "already exists" in err


def test_different_targets_keep_their_own_incidents(tmp_path):
    a = write_run_bundle(tmp_path / "a/ra", "ra", {"lost-ack": [(0, "pass")]}, target="fixture:live")
    b = write_run_bundle(tmp_path / "b/rb", "rb", {"lost-ack": [(0, "fail")]}, target="fixture:unsafe")
    merged = merge([a, b], tmp_path / "m")
    assert merged.name.startswith("merged-")
    run = read(merged / "run.json")
    assert run["target"] == "fixture:live, fixture:unsafe"
    assert sorted((e["incident"], e["verdict"]) for e in run["experiments"]) == [
        ("incidents/fixture-unsafe-lost-ack.json", "fail"),
        ("incidents/lost-ack.json", "pass"),
    ]
    assert read(merged / "incidents/fixture-unsafe-lost-ack.json")["target"]["name"] == "fixture:unsafe"
    junit = ET.fromstring((merged / "reports/junit.xml").read_bytes())
    assert sorted(s.attrib["name"] for s in junit.iter("testsuite")) == ["fixture:live", "fixture:unsafe"]
    assert verify(merged).ok


def test_a_merged_bundle_merges_again_to_the_same_content(tmp_path):
    a = write_run_bundle(tmp_path / "a/ra", "ra", {"lost-ack": [(0, "pass")]}, target="fixture:live")
    b = write_run_bundle(tmp_path / "b/rb", "rb", {"lost-ack": [(0, "fail")]}, target="fixture:unsafe")
    once = merge([a, b], tmp_path / "m1", run_id="x")
    twice = merge([once], tmp_path / "m2", run_id="x")
    assert read(twice / "run.json") == read(once / "run.json")
    assert verify(twice).ok
