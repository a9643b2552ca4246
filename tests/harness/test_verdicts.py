"""Verdicts come from recorded observations only; a missing one is an error, never a pass."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from acklab.harness.core.verdicts import Judgement
from acklab.harness.core.verdicts import judge as judge_trial
from acklab.harness.targets import Expect
from tests.harness.trial_records import trial_of

EXPECT = Expect(max_effects=1, conflict_status=(409, 422))


def delivery(seq, status, kind="original", event_id="evt_1"):
    return {"seq": seq, "event_id": event_id, "kind": kind, "status": status, "error": None}


def observation(effects, note, event_id="evt_1"):
    return {"event_id": event_id, "effects": effects, "note": note}


def judge(record, expect) -> Judgement:
    return judge_trial(trial_of(record), expect)


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
    assert [(v.invariant, v.observed, v.expected) for v in result.violations] == [
        ("at-most-once-effect", 2, "<= 1")
    ]


def test_an_acknowledged_event_without_effect_violates_acked_exactly_once():
    result = judge(trial([delivery(0, 202)], [observation(0, "before"), observation(0, "final")]), EXPECT)
    assert [v.invariant for v in result.violations] == ["acked-exactly-once"]


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
    assert [(v.invariant, v.observed) for v in result.violations] == [("conflict-rejected", 200)]
    rejected = judge(trial([delivery(0, 200), delivery(1, 409, "conflict")], observations), EXPECT)
    assert rejected.verdict == "pass"


def test_an_accepted_replay_fails_and_an_unanswered_one_is_an_error():
    observations = [observation(0, "before"), observation(1, "final")]
    accepted = judge(trial([delivery(0, 200, "replay-stale")], observations), EXPECT)
    assert {v.invariant for v in accepted.violations} == {"replay-rejected"}
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


def _fault(name, *tries):
    return {
        "name": name,
        "landed": any(landed for _, landed in tries),
        "tries": [
            {"try": n, "event_ids": [event_id], "landed": landed, "evidence": f"try {n}"}
            for n, (event_id, landed) in enumerate(tries, start=1)
        ],
    }


def test_every_attempt_answered_5xx_fails_eventually_acknowledged():
    deliveries = [delivery(i, 500, "original" if i == 0 else "retry") for i in range(4)]
    result = judge(trial(deliveries, [observation(0, "before"), observation(4, "final")]), EXPECT)
    assert {v.invariant for v in result.violations} == {"at-most-once-effect", "eventually-acknowledged"}
    unacked = next(v for v in result.violations if v.invariant == "eventually-acknowledged")
    assert unacked.delivery is not None
    assert (unacked.observed, unacked.delivery.seq) == ("500, 500, 500, 500", 3)
    # No effect either: still the handler's 5xx, not an untested target.
    nothing = judge(trial(deliveries, [observation(0, "before"), observation(0, "final")]), EXPECT)
    assert [v.invariant for v in nothing.violations] == ["eventually-acknowledged"]


def test_a_consumer_that_never_acknowledges_is_told_what_its_provider_then_does():
    deliveries = [delivery(i, 500, "original" if i == 0 else "retry") for i in range(4)]
    record = trial(deliveries, [observation(0, "before"), observation(0, "final")])
    told = {}
    for provider in ("stripe", "shopify", "github"):
        result = judge({**record, "parameters": {"provider": provider}}, EXPECT)
        (unacked,) = result.violations
        told[provider] = unacked.detail.rsplit("); ", 1)[1]
    assert told["stripe"].startswith("Stripe stops retrying the event and may disable the endpoint")
    assert told["stripe"].endswith("after 3 days of failed deliveries")
    assert told["shopify"].startswith("Shopify deletes the subscription")
    assert told["github"].startswith("GitHub never retries by itself")


def test_answers_from_the_labs_own_booting_service_make_the_trial_an_error_never_a_pass():
    booting = [
        {**delivery(i, 503, "original" if i == 0 else "retry"), "service_ready": False} for i in range(4)
    ]
    result = judge(trial(booting, [observation(0, "before"), observation(0, "final")]), EXPECT)
    assert result.verdict == "error"
    assert "booting, restarting or down" in result.errors[0]


def test_a_count_that_grew_after_judgement_fails_at_most_once_and_says_when():
    observations = [observation(0, "before"), observation(1, "final"), observation(2, "late")]
    result = judge(trial([delivery(0, 200), delivery(1, 200, "retry")], observations), EXPECT)
    (violation,) = result.violations
    assert (violation.invariant, violation.observed) == ("at-most-once-effect", 2)
    assert "after the trial was judged" in violation.detail


def test_a_late_read_that_failed_is_an_error_unless_a_violation_is_proven():
    passing = trial([delivery(0, 200)], [observation(0, "before"), observation(1, "final")])
    passing["late_read"] = {"at": "2026-01-01T00:00:00Z", "error": "probe down"}
    assert judge(passing, EXPECT).verdict == "error"
    failing = trial([delivery(0, 200)], [observation(0, "before"), observation(2, "final")])
    failing["late_read"] = {"at": "2026-01-01T00:00:00Z", "error": "probe down"}
    assert judge(failing, EXPECT).verdict == "fail"


def test_a_fault_that_never_landed_is_an_error_and_a_later_landed_try_is_judged_alone():
    observations = [observation(0, "before", "evt_1"), observation(1, "final", "evt_1")]
    never = trial([delivery(0, 200)], observations)
    never["fault"] = _fault("lost-ack", ("evt_1", False))
    result = judge(never, EXPECT)
    assert result.verdict == "error"
    assert "never landed" in result.errors[-1]
    # Try 1 (no answer: an error on its own) did not land; try 2 did and keeps the invariant.
    two = trial(
        [delivery(0, None, event_id="evt_1"), delivery(1, 200, event_id="evt_2")],
        [
            observation(0, "before", "evt_1"),
            observation(0, "final", "evt_1"),
            observation(0, "before", "evt_2"),
            observation(1, "final", "evt_2"),
        ],
        event_ids=("evt_1", "evt_2"),
    )
    two["fault"] = _fault("lost-ack", ("evt_1", False), ("evt_2", True))
    assert judge(two, EXPECT).verdict == "pass"


def test_a_violation_in_a_try_whose_fault_did_not_land_still_fails_the_trial():
    deliveries = [delivery(0, 500), delivery(1, 500, "retry")]
    record = trial(deliveries, [observation(0, "before"), observation(2, "final")])
    record["fault"] = _fault("lost-ack", ("evt_1", False))
    result = judge(record, EXPECT)
    assert result.verdict == "fail"
    assert result.errors  # the fault's story is kept beside the violation


def test_conflict_ignore_accepts_a_2xx_and_fails_on_a_changed_state():
    ignore = Expect(conflict="ignore")
    same = [
        observation(0, "before"),
        {**observation(1, "before-conflict"), "state": "[[1200]]"},
        {**observation(1, "final"), "state": "[[1200]]"},
    ]
    deliveries = [delivery(0, 200), delivery(1, 200, "conflict")]
    assert judge(trial(deliveries, same), ignore).verdict == "pass"
    assert judge(trial(deliveries, same), EXPECT).verdict == "fail"  # reject wants 409/422
    changed = [*same[:2], {**observation(1, "final"), "state": "[[9900]]"}]
    (violation,) = judge(trial(deliveries, changed), ignore).violations
    assert (violation.invariant, violation.observed) == ("conflict-rejected", "[[9900]]")
    refused = judge(trial([delivery(0, 200), delivery(1, 409, "conflict")], same), ignore)
    assert [v.observed for v in refused.violations] == [409]


def test_a_failed_control_delivery_in_replay_is_named_as_the_control():
    deliveries = [
        delivery(0, 500, "original"),
        delivery(1, 500, "retry"),
        delivery(2, 401, "replay-foreign-secret", event_id="evt_2"),
    ]
    observations = [
        observation(0, "before"),
        observation(2, "final"),
        observation(0, "before", "evt_2"),
        observation(0, "final", "evt_2"),
    ]
    result = judge(trial(deliveries, observations, event_ids=("evt_1", "evt_2")), EXPECT)
    assert {v.event_id for v in result.violations} == {"evt_1"}
    assert all("control" in v.detail for v in result.violations)
    assert "replay-rejected" not in {v.invariant for v in result.violations}


def test_a_proven_violation_outweighs_an_error_elsewhere():
    from acklab.harness.core.verdicts import combine

    assert combine(["pass", "error", "fail"]) == "fail"
    assert combine(["pass", "error"]) == "error"
    assert combine(["pass", "skipped"]) == "pass"
    assert combine(["skipped"]) == "error"


def _lost(seq=0):
    return delivery(seq, 200) | {"sender_status": 504, "fault": "lost-ack"}


def test_acknowledgement_is_what_the_sender_received_a_lost_ack_then_duplicates_answered_500_fail():
    retries = [delivery(n, 500, "retry") | {"attempt": n + 1} for n in (1, 2, 3)]
    observations = [observation(0, "before"), observation(1, "final")]
    result = judge(trial([_lost(), *retries], observations), EXPECT)
    (violation,) = result.violations
    assert violation.invariant == "eventually-acknowledged"
    assert violation.observed == "504, 500, 500, 500"  # as the sender saw them
    assert "duplicates were answered 500, 500, 500" in violation.detail
    # The same lost acknowledgement, then a retry acknowledged: the sender got its 2xx.
    passed = judge(trial([_lost(), delivery(1, 200, "retry")], observations), EXPECT)
    assert (passed.verdict, passed.violations) == ("pass", [])
    # A duplicate refused with a 4xx after the handler processed the event is no acknowledgement either.
    refused = judge(trial([_lost(), delivery(1, 409, "retry")], observations), EXPECT)
    assert [v.invariant for v in refused.violations] == ["eventually-acknowledged"]


def test_a_handler_that_never_answers_fails_even_when_the_probe_could_not_read():
    hung = {"status": None, "sender_status": None, "error": "sender: timeout: sender timed out after 2.000 s"}
    attempts = [delivery(n, None, "original" if n == 0 else "retry") | hung for n in range(3)]
    record = trial(attempts, [observation(0, "before")]) | {"parameters": {"sender_timeout_s": 2.0}}
    result = judge(record, EXPECT)
    assert result.verdict == "fail"
    (violation,) = result.violations
    assert violation.invariant == "eventually-acknowledged"
    assert "within the sender's timeout of 2 s on any of its 3 attempt(s)" in violation.detail
    assert "final" in result.errors[0]  # the probe's failure is kept beside the verdict


def test_a_connection_the_lab_could_not_open_is_the_labs_error():
    refused = {"error": "sender: ConnectError: All connection attempts failed; handler: ConnectError: x"}
    result = judge(
        trial([delivery(0, None) | refused], [observation(0, "before"), observation(0, "final")]), EXPECT
    )
    assert (result.verdict, result.violations) == ("error", [])
    assert "could not connect" in result.errors[0]


def test_a_conflict_violation_whose_state_still_shows_the_original_names_the_originals_late_effect():
    observations = [
        observation(0, "before"),
        observation(0, "before-conflict") | {"state": "[]"},
        observation(1, "final") | {"state": "[[1200.0]]"},  # the original's amount, read with its count
    ]
    record = trial([delivery(0, 200), delivery(1, 409, "conflict")], observations)
    record["fault"] = _fault("conflicting-payload", ("evt_1", True))
    changed = [{"path": "data.amount_cents", "original": 1200, "conflicting": 9900}]
    record["fault"]["tries"][0]["facts"] = {"conflict_fields": changed}
    result = judge(record, EXPECT)
    details = [v.detail for v in result.violations if v.invariant == "conflict-rejected"]
    assert details  # the count moved: still a violation of the trial as read
    assert all("this is the original's effect" in d for d in details)
    assert all("set expect.effects_within_s" in d for d in details)
    # The conflict's own amount in the state: the conflicting body did it, and no hint is given.
    observations[2]["state"] = "[[9900]]"
    blamed = judge(record, EXPECT)
    assert not any("original's effect" in v.detail for v in blamed.violations)
