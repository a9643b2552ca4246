"""no-2xx-without-commit: judged from the records alone, like every other invariant."""

from __future__ import annotations

from acklab.harness.core.verdicts import Judgement
from acklab.harness.core.verdicts import judge as judge_trial
from acklab.harness.targets import Expect
from tests.harness.trial_records import trial_of


def judge(record: dict, expect: Expect) -> Judgement:
    return judge_trial(trial_of(record), expect)


def record(first_status: int, after_fault: int, final: int) -> dict:
    def delivery(seq: int, kind: str, status: int) -> dict:
        return {"seq": seq, "event_id": "evt_1", "kind": kind, "status": status, "attempt": seq + 1}

    def seen(note: str, effects: int, after_seq: int | None) -> dict:
        return {"event_id": "evt_1", "note": note, "effects": effects, "after_seq": after_seq}

    deliveries = [delivery(0, "original", first_status)]
    if first_status >= 300:
        deliveries.append(delivery(1, "retry", 200))
    return {
        "trial_id": "db-reset-0000",
        "event_ids": ["evt_1"],
        "deliveries": deliveries,
        "observations": [
            seen("before", 0, None),
            seen("after-fault", after_fault, 0),
            seen("final", final, 1),
        ],
    }


def test_a_2xx_that_committed_nothing_during_the_fault_is_a_violation():
    judgement = judge(record(first_status=200, after_fault=0, final=0), Expect())
    assert [v.invariant for v in judgement.violations] == ["acked-exactly-once", "no-2xx-without-commit"]
    assert judgement.violations[1].observed == 200


def test_a_5xx_during_the_fault_then_one_effect_passes():
    assert judge(record(first_status=503, after_fault=0, final=1), Expect()).verdict == "pass"


def test_a_2xx_whose_commit_shows_after_the_fault_passes():
    assert judge(record(first_status=200, after_fault=1, final=1), Expect()).verdict == "pass"
