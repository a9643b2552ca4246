"""`acklab run --compare-with`: one plan (one seed) against every target, one comparison bundle,
the exit code of --target; and the CI seed / demo paths that make runs comparable by construction."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from acklab.cli import main
from acklab.evidence.bundle import verify
from acklab.evidence.loading import load_evidence_json
from acklab.evidence.validate import validate
from acklab.harness.engine.comparison import compared_targets
from acklab.harness.errors import HarnessError


def acklab(*argv: object) -> int:
    with pytest.raises(SystemExit) as exited:
        main([str(a) for a in argv])
    return int(exited.value.code or 0)


def event_ids(incident_path: str) -> list[str]:
    incident = load_evidence_json(Path(incident_path))
    return [d["event_id"] for t in incident["trials"] for d in t["deliveries"]]


@pytest.mark.slow
def test_one_plan_against_two_targets_in_one_bundle(tmp_path, capsys):
    out = tmp_path / "out"
    code = acklab(
        "run", "--target", "fixture:live", "--compare-with", "fixture:unsafe", "--experiment", "lost-ack",
        "--trials", 2, "--out", out, "--json",
    )  # fmt: skip
    captured = capsys.readouterr()
    assert code == 0, captured.err  # --target's verdict: the unsafe reference failing is the point
    result = json.loads(captured.out)
    assert (result["target"], result["verdict"]) == ("fixture:live", "pass")
    [compared] = result["compared"]
    assert (compared["target"], compared["verdict"]) == ("fixture:unsafe", "fail")

    comparison = Path(result["comparison"])
    assert [p.name for p in out.iterdir() if p.is_dir()] == [comparison.name]  # one bundle
    doc = load_evidence_json(comparison / "comparison.json")
    validate("comparison", doc)
    assert doc["targets"] == ["fixture:live", "fixture:unsafe"]
    assert [r["verdict"] for r in doc["runs"]] == ["pass", "fail"]
    assert load_evidence_json(comparison / "manifest.json")["kind"] == "comparison"
    for bundle in (comparison, comparison / doc["runs"][0]["bundle"], comparison / doc["runs"][1]["bundle"]):
        assert verify(bundle).ok, bundle
    seeds = {load_evidence_json(Path(r["bundle"]) / "run.json")["seed"] for r in (result, compared)}
    assert seeds == {doc["seed"]}
    # the same plan: the same events, delivery for delivery, on both handlers
    live_events = event_ids(result["experiments"][0]["incident"])
    assert live_events == event_ids(compared["experiments"][0]["incident"])
    assert len(live_events) == 4  # two trials, an original and a retry each
    assert f"(seed {doc['seed']}): {comparison}" in captured.err


def test_compared_targets_are_listed_once_each():
    assert compared_targets("fixture:live", ["fixture:unsafe, fixture:live", "a.yaml"]) == (
        "fixture:live",
        "fixture:unsafe",
        "a.yaml",
    )


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("--compare-with", "fixture:live"), "nothing to compare"),
        (("--compare-with", "fixture:unsafe,,x"), "empty target"),
        (("--compare-with", "fixture:unsafe", "--resume", "r1"), "--resume"),
        (("--compare-with", "fixture:unsafe", "--shard", "1/2"), "--shard"),
        (("--compare-with", ",".join(f"t{n}.yaml" for n in range(9))), "at most 8"),
    ],
    ids=["itself", "empty", "resume", "shard", "too-many"],
)
def test_a_comparison_that_cannot_be_is_a_usage_error_and_runs_nothing(tmp_path, capsys, args, says):
    out = tmp_path / "out"
    assert acklab("run", "--target", "fixture:live", *args, "--out", out) == 2
    assert says in capsys.readouterr().err
    assert not out.exists()


def test_usage_errors_carry_exit_2():
    with pytest.raises(HarnessError) as raised:
        compared_targets("a", [])
    assert raised.value.exit_code == 2
