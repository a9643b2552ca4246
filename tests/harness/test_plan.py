"""The frozen plan: same seed, same plan; shards split it without loss or overlap."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from acklab.harness.core.plan import RunSettings, parse_shard
from acklab.harness.engine.runner import build_plan
from acklab.harness.errors import SpecError
from acklab.harness.experiments import EXPERIMENTS
from acklab.harness.targets.fixture import fixture_target

TARGET = fixture_target("fixture:live", db_url=None)
ALL = list(EXPERIMENTS.values())


def plan(seed, trials=2, shard=None, experiments=ALL):
    return build_plan(TARGET, experiments, trials=trials, seed=seed, shard=shard, settings=RunSettings())


@settings(max_examples=50, deadline=None)
@given(seed=st.integers(min_value=0, max_value=2**63), trials=st.integers(min_value=1, max_value=4))
def test_the_same_seed_gives_the_same_plan_and_fresh_event_ids(seed, trials):
    first, again = plan(seed, trials), plan(seed, trials)
    assert first.as_dict() == again.as_dict()
    ids = [event_id for trial in first.trials for event_id in trial.event_ids]
    assert len(ids) == len(set(ids)), "an event id is reused within a run"


@settings(max_examples=50, deadline=None)
@given(
    seed=st.integers(min_value=0, max_value=2**32),
    trials=st.integers(min_value=1, max_value=5),
    shards=st.integers(min_value=1, max_value=7),
)
def test_shards_partition_the_plan(seed, trials, shards):
    whole = [t.trial_id for t in plan(seed, trials).trials]
    parts = [[t.trial_id for t in plan(seed, trials, shard=(i, shards)).trials] for i in range(1, shards + 1)]
    assert sorted(trial for part in parts for trial in part) == sorted(whole)
    assert sum(map(len, parts)) == len(whole)
    assert max(map(len, parts)) - min(map(len, parts)) <= 1


def test_different_seeds_give_different_event_ids():
    assert plan(1).trials[0].event_ids != plan(2).trials[0].event_ids


def test_a_shard_is_written_i_slash_n():
    assert parse_shard("2/4") == (2, 4)
    for bad in ("0/4", "5/4", "2-4", "x/y"):
        with pytest.raises(SpecError, match="I/N"):
            parse_shard(bad)


def test_the_plan_lists_the_faults_and_retries_of_each_trial():
    trial = plan(7, experiments=[EXPERIMENTS["lost-ack"]]).trials[0]
    kinds = [(d.kind, d.attempt, d.fault, d.when) for d in trial.deliveries]
    assert kinds[0] == ("original", 1, "lost-ack", "always")
    assert all(k[0] == "retry" and k[2] == "none" for k in kinds[1:])
    burst = plan(7, experiments=[EXPERIMENTS["concurrent-duplicates"]]).trials[0]
    sent = [(d.kind, d.attempt, d.when) for d in burst.deliveries]
    # 16 duplicates released together, then the provider's retries if none was acknowledged.
    assert sent[:16] == [("duplicate", 1, "always")] * 16
    assert sent[16:] == [("retry", n, "until acknowledged") for n in (2, 3, 4)]
