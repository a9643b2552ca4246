"""The sinks read what the customer reads: a receipt sent base64, quoted-printable or multipart,
and a refund call whose JSON escapes the order id, count as the plain ones do.

Real consumers (`tests.consumers.receipt_mailer` on smtplib, `tests.consumers.refunds` on httpx)
send them to the lab's sinks; in none of them does the order id appear on the wire as written,
which each test checks in the record the sink kept. The correct twins over 20 runs are
``bench/sinks.py``.
"""

from __future__ import annotations

import json

import pytest

from tests.consumers import sink_scenarios
from tests.consumers.test_sinks import TWO_REFUNDS, violations
from tests.consumers.test_verdict_trust import check

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("encoding", ["base64", "quoted-printable", "multipart"])
def test_a_second_receipt_encoded_for_the_wire_fails_as_the_plain_one_does(tmp_path, encoding):
    scenario = sink_scenarios.receipt_mailer(
        tmp_path, "every-delivery", ("lost-ack",), {"lost-ack": "fail"}, encoding=encoding
    )
    (bad,) = check(scenario, tmp_path / "out")
    found = violations(bad, "lost-ack")
    assert {(v["invariant"], v.get("source")) for v in found} == {("at-most-once-effect", "emails")}
    assert found[0]["observed"] == 2
    trial = json.loads(next((bad.bundle / "trials").glob("lost-ack-*.json")).read_text())
    records = json.loads((bad.bundle / "sinks" / "smtp.json").read_text())["records"]
    assert len(records) == 2
    (event_id,) = trial["event_ids"]
    assert all(r["events"] == [event_id] for r in records)
    # what made it hard: the order id is nowhere in the bytes the sink received
    final = next(o for o in trial["observations"] if o["note"] == "final")
    order_id = final["object_id"]
    assert order_id
    assert all(order_id not in r["excerpt"] for r in records)
    # the record shows the subject as the customer reads it
    assert all(r["headers"]["Subject"] == f"Reçu de votre commande {order_id}" for r in records)


def test_a_refund_call_with_an_escaped_order_id_fails_as_the_plain_one_does(tmp_path):
    scenario = sink_scenarios.refunds(
        tmp_path, "fresh-key", ("lost-ack",), {"lost-ack": "fail"}, body="escaped"
    )
    (bad,) = check(scenario, tmp_path / "out")
    assert {(v["invariant"], v.get("source")) for v in violations(bad, "lost-ack")} == TWO_REFUNDS
    calls = json.loads((bad.bundle / "sinks" / "outbound.json").read_text())["records"]
    assert len(calls) == 2
    assert all("\\u005f" in c["excerpt"] and "ord_" not in c["excerpt"] for c in calls)


def test_a_consumer_correct_in_every_encoding_passes(tmp_path):
    # One receipt per event, each in the next encoding: four experiments make at least four events.
    experiments = ("lost-ack", "lost-ack-reset", "timeout-overlap", "concurrent-duplicates")
    mailer = sink_scenarios.receipt_mailer(
        tmp_path, "after-commit", experiments, dict.fromkeys(experiments, "pass"), encoding="rotate"
    )
    (good,) = check(mailer, tmp_path / "out")
    assert good.exit_code == 0
    records = json.loads((good.bundle / "sinks" / "smtp.json").read_text())["records"]
    assert all(len(r["events"]) == 1 for r in records)
    assert len({r["events"][0] for r in records}) == len(records)  # one receipt per event, each counted
    sent_as = {
        "multipart" if r["headers"]["Content-Type"].startswith("multipart/") else r["headers"].get(
            "Content-Transfer-Encoding", "7bit")
        for r in records
    }  # fmt: skip
    assert sent_as == {"7bit", "base64", "quoted-printable", "multipart"}
    refunds = sink_scenarios.refunds(
        tmp_path, "event-key", ("lost-ack",), {"lost-ack": "pass"}, body="escaped"
    )
    (keyed,) = check(refunds, tmp_path / "out2")
    assert keyed.exit_code == 0
