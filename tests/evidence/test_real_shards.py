"""Real shards (`acklab run --shard I/N`, as parallel CI jobs run them) merge into the run they split."""

from __future__ import annotations

import json

import pytest

from acklab.evidence.bundle import find_bundles, verify
from acklab.evidence.validate import validate
from tests.evidence.test_real_run import leaks, run_acklab

# Four real `acklab run` processes (three shards and the whole run).
pytestmark = pytest.mark.slow

ARGS: tuple[str, ...] = (
    "run",
    "--target",
    "fixture:unsafe",
    "--experiment",
    "lost-ack",
    "--experiment",
    "replay",
)
ARGS += ("--trials", "2", "--seed", "11", "--json")


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("real-shards")
    procs = [run_acklab(workdir, *ARGS, "--shard", f"{n}/2", "--out", f"job{n}") for n in (1, 2)]
    procs.append(run_acklab(workdir, *ARGS, "--out", "whole"))
    for proc in procs:
        assert proc.returncode == 1, proc.stderr.decode(errors="replace")[-3000:]  # the unsafe handler fails
    procs.append(run_acklab(workdir, "evidence", "merge", "job1", "job2", "--out", "merged"))
    assert procs[-1].returncode == 0, procs[-1].stderr.decode(errors="replace")
    return workdir, procs


def test_merged_shards_hold_the_same_trials_and_verdicts_as_one_run(shards):
    workdir, procs = shards
    [merged] = find_bundles(workdir / "merged")
    assert merged == workdir / "merged" / procs[-1].stdout.decode().strip().split("/")[-1]
    assert verify(merged).ok
    [whole] = find_bundles(workdir / "whole")

    def summary(bundle):
        run = json.loads((bundle / "run.json").read_text())
        return run["verdict"], sorted(
            (e["name"], e["verdict"], e["trials"], len(e["violations"])) for e in run["experiments"]
        )

    assert summary(merged) == summary(whole)
    assert sorted(p.name for p in (merged / "trials").iterdir()) == sorted(
        p.name for p in (whole / "trials").iterdir()
    )
    merged_run = json.loads((merged / "run.json").read_text())
    assert merged_run["status"] == "complete"
    for entry in merged_run["experiments"]:
        incident = json.loads((merged / entry["incident"]).read_text())
        validate("incident", incident)
        assert incident["run_id"] == merged_run["run_id"]
        assert incident["incident_id"] == f"{merged_run['run_id']}-{entry['name']}"
        assert [t["index"] for t in incident["trials"]] == [0, 1]
    manifest = json.loads((merged / "manifest.json").read_text())
    assert manifest["kind"] == "merged"
    assert len(manifest["merged_from"]) == 2


def test_no_planted_secret_reaches_the_shards_or_the_merge(shards):
    workdir, procs = shards
    assert leaks(workdir, *procs) == []
