"""The provider talks back: consumers that fetch from its API, hear its echoes, keep its running totals,
lose an effect, and verify what it signs — each beside its correct twin (docs/provider-api.md,
docs/signatures.md). One run proves each behaviour; the 20-run reliability loops are
``bench/provider_api.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from acklab.harness.engine.runner import RunResult
from tests.consumers import provider_scenarios, sink_scenarios
from tests.consumers.test_sinks import every_byte
from tests.consumers.test_verdict_trust import assert_every_trial_proved_its_fault, check

pytestmark = pytest.mark.slow

FETCHES = ("fetch-lag", "fetch-stale", "fetch-throttled")


def invariants(result: RunResult, experiment: str) -> set[tuple[str, str | None]]:
    entry = next(e for e in result.run["experiments"] if e["name"] == experiment)
    return {(v["invariant"], v.get("source")) for v in entry["violations"]}


def api_log(result: RunResult) -> list[dict]:
    assert result.bundle is not None
    return json.loads((result.bundle / "sinks" / "provider_api.json").read_text())["records"]


def test_a_consumer_that_acknowledges_what_it_could_not_fetch_fails_and_its_twin_passes(
    tmp_path: Path,
) -> None:
    scenario = provider_scenarios.stripe_fetch(tmp_path, "drop", FETCHES, dict.fromkeys(FETCHES, "fail"))
    (bad,) = check(scenario, tmp_path / "out")
    for name in FETCHES:
        assert invariants(bad, name) == {("acked-exactly-once", None)}, name
    served = {r["served"]: r for r in api_log(bad) if r.get("served")}
    assert served["lag"]["status"] == 404
    assert served["throttled"]["status"] == 429
    assert served["stale"]["status"] == 200
    assert all(r["headers"]["authorization"] == "[redacted]" for r in api_log(bad))
    # the twin answers 503 until the API has caught up; a forged event naming invented objects gets a 404
    twin = (*FETCHES, "replay")
    (good,) = check(provider_scenarios.stripe_fetch(tmp_path, "retry-later", twin, dict.fromkeys(twin, "pass")),
                    tmp_path / "out2")  # fmt: skip
    assert_every_trial_proved_its_fault(good)
    for result in (bad, good):
        assert result.bundle is not None
        assert provider_scenarios.API_KEY.encode() not in every_byte(result.bundle)


def test_a_consumer_that_authenticates_by_refetching_fulfils_a_cross_wired_order(tmp_path: Path) -> None:
    scenario = provider_scenarios.stripe_fetch(tmp_path, "refetch-only", ("replay",), {"replay": "fail"})
    (result,) = check(scenario, tmp_path / "out")
    entry = next(e for e in result.run["experiments"] if e["name"] == "replay")
    # every other forged event named objects no event made: 404 from the API, 503 from the consumer
    assert {v["delivery"]["kind"] for v in entry["violations"]} == {"replay-cross-wired"}
    assert {v["observed"] for v in entry["violations"]} == {200, 1}  # accepted, and one order fulfilled
    missing = [r for r in api_log(result) if r["status"] == 404]
    assert len(missing) == 3


def test_a_refund_recorded_by_its_own_echo_fails_provider_echo_and_by_refund_id_passes(
    tmp_path: Path,
) -> None:
    scenario = provider_scenarios.stripe_refunds(
        tmp_path, "check-then-insert", ("provider-echo",), {"provider-echo": "fail"}
    )
    (bad,) = check(scenario, tmp_path / "out")
    assert invariants(bad, "provider-echo") == {("at-most-once-per-object", "rows")}
    [trial] = [json.loads(p.read_text()) for p in (bad.bundle or Path()).glob("trials/provider-echo-*.json")]
    assert [e["type"] for e in trial["objects"][0]["events"]] == [
        "checkout.session.completed",
        "charge.refunded",
    ]
    (refund,) = [r for r in api_log(bad) if r["effect"]]
    assert refund["echoed"]
    assert refund["path"] == "/v1/refunds"
    twin = ("provider-echo", "lost-ack")
    (good,) = check(provider_scenarios.stripe_refunds(tmp_path, "by-refund-id", twin, dict.fromkeys(twin, "pass")),
                    tmp_path / "out2")  # fmt: skip
    assert_every_trial_proved_its_fault(good)


def test_a_ledger_adding_cumulative_amounts_fails_totals_match_and_one_booking_differences_passes(
    tmp_path: Path,
) -> None:
    (bad,) = check(
        provider_scenarios.refund_ledger(
            tmp_path, "add-cumulative", ("out-of-order",), {"out-of-order": "fail"}
        ),
        tmp_path / "out",
    )
    assert ("totals-match", None) in invariants(bad, "out-of-order")
    twin = ("out-of-order", "concurrent-duplicates")
    (good,) = check(provider_scenarios.refund_ledger(tmp_path, "difference", twin, dict.fromkeys(twin, "pass")),
                    tmp_path / "out2")  # fmt: skip
    [trial] = [json.loads(p.read_text()) for p in (good.bundle or Path()).glob("trials/out-of-order-*.json")]
    finals = [o for o in trial["observations"] if o["note"] == "final"]
    assert {o["total"] for o in finals} == {1200}
    assert set(trial["parameters"]["totals"].values()) == {1200}


def test_a_mailer_that_acknowledges_a_refused_receipt_fails_effect_failure_and_its_twin_passes(
    tmp_path: Path,
) -> None:
    bad_scenario = sink_scenarios.receipt_mailer(
        tmp_path, "swallow-refusal", ("effect-failure",), {"effect-failure": "fail"}
    )
    (bad,) = check(bad_scenario, tmp_path / "out")
    assert invariants(bad, "effect-failure") == {("acked-exactly-once", "emails")}
    good_scenario = sink_scenarios.receipt_mailer(
        tmp_path, "fail-on-refusal", ("effect-failure",), {"effect-failure": "pass"}
    )
    (good,) = check(good_scenario, tmp_path / "out2")
    assert good.bundle is not None
    # one receipt refused (554), one stalled until the attempt was answered (then 451): both retried
    served = [
        r.get("served") for r in json.loads((good.bundle / "sinks" / "smtp.json").read_text())["records"]
    ]
    assert sorted(served, key=str) == [None, None, "refused", "stalled"], served


def test_a_mailer_that_acknowledges_when_its_relay_times_out_fails_only_on_the_stalled_receipt(
    tmp_path: Path,
) -> None:
    # It answers 503 to a refused receipt (as its twin above), but takes a relay that does not answer
    # within a second for a slow one that will deliver: the stalled event is acknowledged, unmailed.
    scenario = sink_scenarios.receipt_mailer(
        tmp_path, "swallow-timeout", ("effect-failure",), {"effect-failure": "fail"}
    )
    (result,) = check(scenario, tmp_path / "out")
    assert invariants(result, "effect-failure") == {("acked-exactly-once", "emails")}
    assert result.bundle is not None
    [trial] = [json.loads(p.read_text()) for p in result.bundle.glob("trials/effect-failure-*.json")]
    _, stalled = trial["fault"]["tries"][-1]["event_ids"]
    entry = next(e for e in result.run["experiments"] if e["name"] == "effect-failure")
    assert {v["event_id"] for v in entry["violations"]} == {stalled}


@pytest.mark.parametrize(
    ("mode", "experiment"), [("first-signature", "key-rotation"), ("reserialised", "raw-bytes")]
)
def test_a_verifier_that_rejects_what_the_provider_really_signs_loses_the_event(
    tmp_path: Path, mode: str, experiment: str
) -> None:
    scenario = provider_scenarios.stripe_verifier(tmp_path, mode, (experiment,), {experiment: "fail"})
    (result,) = check(scenario, tmp_path / "out")
    assert invariants(result, experiment) == {("eventually-acknowledged", None)}
    entry = next(e for e in result.run["experiments"] if e["name"] == experiment)
    assert all("although the event was genuine" in v["detail"] for v in entry["violations"])


def test_the_stripe_library_verifier_passes_a_rotation_raw_bytes_and_a_skewed_clock(tmp_path: Path) -> None:
    names = ("key-rotation", "raw-bytes", "clock-skew")
    (result,) = check(provider_scenarios.stripe_verifier(tmp_path, "library", names, dict.fromkeys(names, "pass")),
                      tmp_path / "out")  # fmt: skip
    assert_every_trial_proved_its_fault(result)
    assert result.bundle is not None
    [trial] = [json.loads(p.read_text()) for p in result.bundle.glob("trials/key-rotation-*.json")]
    kinds = [d["kind"] for d in trial["deliveries"]]
    assert kinds.count("replay-expired-secret") == 1  # signed with the retired secret only: refused
    assert provider_scenarios.OLD_STRIPE_SECRET.encode() not in every_byte(result.bundle)
