"""The explorer beyond one event: reorder, sibling and competitor steps, checked after each, and shrunk."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from acklab.harness.explore.explorer import LabSession, explore_target, replay_schedule
from acklab.harness.explore.schedules import Step
from acklab.harness.targets import Target, resolve_target
from tests.consumers import object_scenarios
from tests.consumers.scenarios import SECRETS, write

pytestmark = pytest.mark.slow


@pytest.fixture
def session_of() -> Iterator:
    targets: list[Target] = []

    def make(ref: str, seed: int = 3) -> LabSession:
        target = resolve_target(ref)
        targets.append(target)
        return LabSession(target, seed=seed)

    yield make
    for target in targets:
        asyncio.run(target.aclose())


def invariants(result) -> list[str]:
    return [v.invariant for v in result.violations]


def test_a_late_older_lifecycle_event_breaks_the_unsafe_fixture_not_the_live_one(session_of):
    schedule = [Step("reorder", 0, 3), Step("reorder", 0, 1)]  # refunded, then created
    with session_of("fixture:unsafe") as session:
        unsafe = replay_schedule(session, schedule)
    assert invariants(unsafe) == ["state-never-regresses", "newest-state-wins"]
    assert "after step 1 (reorder(lifecycle event 1" in unsafe.violations[0].detail
    with session_of("fixture:live") as session:
        assert replay_schedule(session, schedule).violations == []


@pytest.mark.parametrize("step", [Step("sibling", 0, 1), Step("competitor", 0)], ids=str)
def test_a_sibling_or_the_apps_own_request_after_the_event_fulfils_the_unsafe_order_twice(session_of, step):
    with session_of("fixture:unsafe") as session:
        unsafe = replay_schedule(session, [Step("send", 0), step])
    assert invariants(unsafe) == ["at-most-once-per-object"]
    assert unsafe.violations[0].observed == 2
    with session_of("fixture:live") as session:
        live = replay_schedule(session, [step, Step("send", 0), step])  # either order, and again
    assert live.violations == []


def test_the_explorer_finds_and_shrinks_an_ordering_bug(tmp_path, monkeypatch):
    """A store that applies events as they arrive, and has no other bug: the minimal schedule is two reorders."""
    for key, value in SECRETS.items():
        monkeypatch.setenv(key, value)
    scenario = object_scenarios.subscriptions(tmp_path, "arrival")
    doc = json.loads(json.dumps(__import__("yaml").safe_load(scenario.spec.read_text())))
    doc["expect"]["conflict"] = "ignore"  # it dedupes nothing, but a conflicting body changes no row count
    spec = write(Path(scenario.spec), doc)
    target = resolve_target(str(spec))
    try:
        with LabSession(target, seed=7) as session:
            found = explore_target(session, budget=60)
    finally:
        asyncio.run(target.aclose())
    assert found.failure is not None
    steps = found.failure.runner.steps
    assert [s.op for s in steps] == ["reorder", "reorder"], [str(s) for s in steps]
    newer, older = steps
    assert (newer.event, older.event) == (0, 0)
    assert newer.n > older.n  # the newer event first, then an older one
    assert "newest-state-wins" in invariants(found.failure)
