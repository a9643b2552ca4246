"""Verdicts come from recorded observations only; a missing one is an error, never a pass."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from acklab.harness.targets import Expect
from acklab.harness.verdicts import judge

EXPECT = Expect(max_effects=1, conflict_status=(409, 422))


def delivery(seq, status, kind="original", event_id="evt_1"):
    return {"seq": seq, "event_id": event_id, "kind": kind, "status": status, "error": None}


def observation(effects, note, event_id="evt_1"):
    return {"event_id": event_id, "effects": effects, "note": note}


def trial(deliveries, observations, event_ids=("evt_1",)):
    return {
        "trial_id": "t-0000",
        "event_ids": list(event_ids),
        "deliveries": deliveries,
        "observations": observations,
    }


def test_one_effect_after_a_replayed_retry_passes():
    result = judge(
        trial(
            [delivery(0, 200), delivery(1, 200, "retry")], [observation(0, "before"), observation(1, "final")]
        ),
        EXPECT,
    )
    assert (result.verdict, result.violations) == ("pass", [])


def test_two_effects_violate_at_most_once():
    result = judge(
        trial(
            [delivery(0, 200), delivery(1, 200, "retry")], [observation(0, "before"), observation(2, "final")]
        ),
        EXPECT,
    )
    assert result.verdict == "fail"
    assert [(v["invariant"], v["observed"], v["expected"]) for v in result.violations] == [
        ("at-most-once-effect", 2, "<= 1")
    ]


def test_an_acknowledged_event_without_effect_violates_acked_exactly_once():
    result = judge(trial([delivery(0, 202)], [observation(0, "before"), observation(0, "final")]), EXPECT)
    assert [v["invariant"] for v in result.violations] == ["acked-exactly-once"]


def test_a_missing_final_observation_is_an_error_not_a_pass():
    result = judge(trial([delivery(0, 200)], [observation(0, "before")]), EXPECT)
    assert result.verdict == "error"
    assert "final" in result.errors[0]


def test_a_target_that_accepts_nothing_is_an_error():
    result = judge(
        trial(
            [delivery(0, 401), delivery(1, 401, "retry")], [observation(0, "before"), observation(0, "final")]
        ),
        EXPECT,
    )
    assert result.verdict == "error"
    assert "accepted no valid delivery" in result.errors[0]


def test_a_used_event_id_is_an_error():
    result = judge(trial([delivery(0, 200)], [observation(1, "before"), observation(1, "final")]), EXPECT)
    assert result.verdict == "error"


def test_a_2xx_to_a_conflicting_body_fails_even_when_the_count_stays_one():
    observations = [observation(0, "before"), observation(1, "before-conflict"), observation(1, "final")]
    result = judge(trial([delivery(0, 200), delivery(1, 200, "conflict")], observations), EXPECT)
    assert [(v["invariant"], v["observed"]) for v in result.violations] == [("conflict-rejected", 200)]
    rejected = judge(trial([delivery(0, 200), delivery(1, 409, "conflict")], observations), EXPECT)
    assert rejected.verdict == "pass"


def test_an_accepted_replay_fails_and_an_unanswered_one_is_an_error():
    observations = [observation(0, "before"), observation(1, "final")]
    accepted = judge(trial([delivery(0, 200, "replay-stale")], observations), EXPECT)
    assert {v["invariant"] for v in accepted.violations} == {"replay-rejected"}
    silent = judge(
        trial([delivery(0, None, "replay-tampered")], [observation(0, "before"), observation(0, "final")]),
        EXPECT,
    )
    assert silent.verdict == "error"


statuses = st.one_of(st.none(), st.sampled_from([200, 201, 202, 204, 400, 401, 409, 422, 500, 503, 504]))


@given(
    statuses=st.lists(statuses, min_size=1, max_size=6),
    final=st.integers(min_value=0, max_value=4),
    drop_before=st.booleans(),
    drop_final=st.booleans(),
)
def test_a_pass_is_only_ever_given_for_a_complete_record_that_keeps_the_invariant(
    statuses, final, drop_before, drop_final
):
    deliveries = [delivery(i, s, "original" if i == 0 else "retry") for i, s in enumerate(statuses)]
    observations = ([] if drop_before else [observation(0, "before")]) + (
        [] if drop_final else [observation(final, "final")]
    )
    result = judge(trial(deliveries, observations), EXPECT)
    if result.verdict == "pass":
        # Complete, and exactly one effect: zero is either a violation (acknowledged) or
        # an untested target (nothing accepted), never a pass.
        assert not drop_before
        assert not drop_final
        assert final == 1
    if final > 1 and not (drop_before or drop_final):
        assert result.verdict == "fail"
