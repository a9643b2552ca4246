"""Effects the world sees (docs/sinks.md) — emails and outbound calls counted, idempotency keys checked.

Each consumer runs as a service the lab starts, its SMTP and payment-API settings pointing
at the lab's sinks; the repetitions the issue asks for (20/20) are ``bench/sinks.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from acklab.harness.engine.runner import RunResult
from tests.consumers import sink_scenarios
from tests.consumers.test_verdict_trust import check

pytestmark = pytest.mark.slow


def violations(result: RunResult, experiment: str) -> list[dict]:
    entry = next(e for e in result.run["experiments"] if e["name"] == experiment)
    return entry["violations"]


# A fresh key per attempt: two refunds downstream for one row; the first belongs to no committed refund.
TWO_REFUNDS = {
    ("idempotent-outbound", None),
    ("at-most-once-effect", "calls"),
    ("no-effect-without-commit", None),
}


def every_byte(bundle: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(bundle.rglob("*")) if p.is_file())


def test_a_receipt_per_delivery_fails_on_emails_only_and_its_twin_passes(tmp_path):
    (bad,) = check(sink_scenarios.django_receipts(tmp_path, "every-delivery", ("lost-ack",), {"lost-ack": "fail"}),
                   tmp_path / "out")  # fmt: skip
    found = violations(bad, "lost-ack")
    assert {(v["invariant"], v.get("source")) for v in found} == {("at-most-once-effect", "emails")}
    assert found[0]["observed"] == 2
    assert "2 emails" in found[0]["detail"]
    assert "database kept 1" in found[0]["detail"]
    smtp = json.loads((bad.bundle / "sinks" / "smtp.json").read_text())
    assert len(smtp["records"]) == 2
    assert smtp["records"][0]["headers"]["Subject"].startswith("Receipt for order")
    # crash-after-commit too: a kill at the first sign of the event must not fail a consumer that mails after it
    twin = ("lost-ack", "concurrent-duplicates", "crash-after-commit")
    (good,) = check(sink_scenarios.django_receipts(tmp_path, "after-commit", twin, dict.fromkeys(twin, "pass")),
                    tmp_path / "out2")  # fmt: skip
    assert good.exit_code == 0
    # the SMTP login Django sent is the consumer's secret: in no byte the lab wrote
    for result in (bad, good):
        written = every_byte(result.bundle)
        assert sink_scenarios.SMTP_PASSWORD.encode() not in written


def test_an_email_before_the_commit_fails_no_effect_without_commit(tmp_path):
    experiments = ("concurrent-duplicates", "crash-after-commit")
    scenario = sink_scenarios.receipt_mailer(
        tmp_path, "before-commit", experiments, dict.fromkeys(experiments, "fail")
    )
    (result,) = check(scenario, tmp_path / "out")
    for experiment in experiments:
        invariants = {v["invariant"] for v in violations(result, experiment)}
        assert {"no-effect-without-commit", "at-most-once-effect"} <= invariants, experiment
    # the crash struck between the email and the commit: the retry mailed the customer again
    trial = json.loads(next((result.bundle / "trials").glob("crash-after-commit-*.json")).read_text())
    assert trial["parameters"]["strike_outcomes"][-1] == "killed-after-send-before-commit"
    final = next(o for o in trial["observations"] if o["note"] == "final")
    assert (final["effects"], final["emails"], final["sent_before_commit"]) == (1, 2, 2)
    written = every_byte(result.bundle)
    assert sink_scenarios.SMTP_PASSWORD.encode() not in written


def test_an_ack_then_process_worker_that_mails_later_is_counted_once_settled(tmp_path):
    scenario = sink_scenarios.receipt_mailer(tmp_path, "worker", ("lost-ack",), {"lost-ack": "pass"})
    (result,) = check(scenario, tmp_path / "out")
    trial = json.loads(next((result.bundle / "trials").glob("lost-ack-*.json")).read_text())
    final = next(o for o in trial["observations"] if o["note"] == "final")
    assert (final["effects"], final["emails"], final["sent_before_commit"]) == (1, 1, 0)


def test_refunds_with_a_fresh_key_per_attempt_fail_idempotent_outbound_and_the_event_key_passes(tmp_path):
    scenario = sink_scenarios.refunds(tmp_path, "fresh-key", ("lost-ack",), {"lost-ack": "fail"})
    (bad,) = check(scenario, tmp_path / "out")
    found = {(v["invariant"], v.get("source")) for v in violations(bad, "lost-ack")}
    assert found == TWO_REFUNDS
    calls = json.loads((bad.bundle / "sinks" / "outbound.json").read_text())["records"]
    assert [c["status"] for c in calls] == [None, 200]  # the first call dropped, the retry answered
    assert calls[0]["headers"]["authorization"] == "[redacted]"
    good_scenario = sink_scenarios.refunds(tmp_path, "event-key", ("lost-ack",), {"lost-ack": "pass"})
    (good,) = check(good_scenario, tmp_path / "out2")
    assert good.exit_code == 0
    for result in (bad, good):
        assert sink_scenarios.API_KEY.encode() not in every_byte(result.bundle)


LAUNCHER = "import sys; from acklab.cli import main; main(sys.argv[1:])"


def test_the_credentials_a_consumer_sends_the_sinks_are_in_no_byte_acklab_writes_or_prints(tmp_path):
    """The consumer's SMTP login and API key reach it from its own environment, never from the
    spec: the lab first meets them when the consumer sends them to its sinks."""
    import base64
    import os
    import subprocess
    import sys
    from urllib.parse import quote, quote_plus

    import yaml

    scenarios = [
        sink_scenarios.django_receipts(tmp_path, "every-delivery", ("lost-ack",), {}),
        sink_scenarios.refunds(tmp_path, "fresh-key", ("lost-ack",), {}),
    ]
    env = {**os.environ, **sink_scenarios.SECRETS, "SMTP_PASSWORD": sink_scenarios.SMTP_PASSWORD,
           "REFUNDS_API_KEY": sink_scenarios.API_KEY}  # fmt: skip
    printed = []
    for scenario in scenarios:
        doc = yaml.safe_load(scenario.spec.read_text())
        for where in (doc["command"]["env"], doc.get("setup", {}).get("env", {})):
            where.pop("SMTP_PASSWORD", None)
            where.pop("REFUNDS_API_KEY", None)
        scenario.spec.write_text(yaml.safe_dump(doc, sort_keys=False))
        done = subprocess.run(
            [sys.executable, "-c", LAUNCHER, "run", "--target", str(scenario.spec), "--experiment", "lost-ack",
             "--trials", "1", "--out", str(tmp_path / "out"), "--json"],
            env=env, capture_output=True, text=True, timeout=300, check=False, cwd=tmp_path,
        )  # fmt: skip
        assert done.returncode == 1, done.stderr[-2000:]  # each fails (emails; calls): the sinks were used
        printed.append(done.stdout + done.stderr)
    written = every_byte(tmp_path / "out")
    assert b'"sinks/smtp.json"' in written
    assert b'"sinks/outbound.json"' in written  # both logs are in a manifest
    for secret in sink_scenarios.CONSUMER_CREDENTIALS:
        for spelling in {
            secret,
            quote(secret, safe=""),
            quote_plus(secret),
            base64.b64encode(secret.encode()).decode(),
        }:
            assert spelling.encode() not in written, spelling
            assert all(spelling not in text for text in printed), spelling
