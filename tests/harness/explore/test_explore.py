"""acklab explore / acklab replay: generated schedules, shrunk counterexamples, exact replays."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from acklab.cli import main
from acklab.evidence.bundle import verify
from acklab.harness.explore.explorer import LabSession, replay_schedule
from acklab.harness.explore.schedules import Step
from acklab.harness.targets import resolve_target

pytestmark = pytest.mark.slow


def acklab(capsys, *argv: str) -> tuple[int, dict]:
    with pytest.raises(SystemExit) as exited:
        main([*argv, "--json"])
    return int(exited.value.code or 0), json.loads(capsys.readouterr().out)


def test_explore_finds_and_shrinks_the_unsafe_handlers_failure_then_replays_it(tmp_path, capsys):
    out = str(tmp_path / "out")
    code, found = acklab(
        capsys, "explore", "--target", "fixture:unsafe", "--budget", "30", "--seed", "1", "--out", out
    )
    assert code == 1
    assert found["verdict"] == "fail"
    assert len(found["schedule"]) == 2  # minimal: one event (or the app's own request) twice
    assert {s["event"] for s in found["schedule"]} == {0}
    # The fixture has a competitor: its browser return twice is the same bug on the order.
    assert found["violations"][0]["invariant"] in ("at-most-once-effect", "at-most-once-per-object")
    incident = json.loads(Path(found["incident"]).read_text())
    assert incident["schedule"] == found["schedule"]
    assert incident["experiment"]["parameters"]["target_ref"] == "fixture:unsafe"
    assert verify(Path(found["bundle"])).ok

    code, replayed = acklab(capsys, "replay", found["incident"], "--out", out)
    assert (code, replayed["schedule"]) == (1, found["schedule"])
    code, on_live = acklab(capsys, "replay", found["incident"], "--target", "fixture:live", "--out", out)
    assert (code, on_live["verdict"], on_live["violations"]) == (0, "pass", [])


def test_explore_finds_nothing_in_the_live_handler_within_budget_100(tmp_path, capsys):
    with pytest.raises(SystemExit) as exited:
        main(
            [
                "explore",
                "--target",
                "fixture:live",
                "--budget",
                "100",
                "--seed",
                "3",
                "--out",
                str(tmp_path),
                "--json",
            ]
        )
    printed = capsys.readouterr()
    found = json.loads(printed.out)
    assert (exited.value.code, found["verdict"], found["violations"]) == (0, "pass", [])
    assert found["examples"] >= 100
    # a pass says how much was searched and where its evidence is, as a failure does
    tried = f"no invariant broken in {found['examples']} schedule(s) of a budget of 100, seed 3"
    assert f"acklab explore: fixture:live: {tried}" in printed.err
    assert f"bundle:   {found['bundle']}" in printed.err
    assert verify(Path(found["bundle"])).ok


def test_a_conflicting_body_accepted_with_200_is_a_violation():
    """The model, not only the counts: the second body under a used id must be rejected."""
    target = resolve_target("fixture:live")
    try:
        with LabSession(target, seed=11) as session:
            result = replay_schedule(session, [Step("send", 0), Step("conflict", 0), Step("burst", 1, 3)])
    finally:
        import asyncio

        asyncio.run(target.aclose())
    assert result.violations == []
    statuses = [d.status for d in result.runner.trial.deliveries]
    assert statuses[:2] == [200, 409]
    assert statuses[2:] == [200, 200, 200]


def test_replay_refuses_an_incident_without_a_schedule(tmp_path, capsys):
    path = tmp_path / "incident.json"
    path.write_text("{}")
    with pytest.raises(SystemExit) as exited:
        main(["replay", str(path)])
    assert exited.value.code == 3
