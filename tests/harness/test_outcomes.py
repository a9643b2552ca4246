"""Outcomes as values: each side of an attempt ends with an outcome recorded beside its error
text; verdicts read outcomes. Bundles written before outcomes existed re-judge to the verdicts
they were written with: their error text is read once, the way the verdicts of that time read it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from acklab.evidence.documents.outcomes import legacy_outcomes
from acklab.evidence.documents.records import Delivery
from acklab.evidence.documents.trial import Trial
from acklab.harness.core.ack_verdicts import hung, role_of, unreachable
from acklab.harness.engine.execute import rejudge
from acklab.harness.wire.records import DeliveryRecord, outcome_of

WRITTEN = Path(__file__).resolve().parents[1] / "data" / "written-by-main"
OLD_TRIALS = sorted(WRITTEN.glob("*/trials/*.json"))


@pytest.mark.parametrize("path", OLD_TRIALS, ids=lambda p: f"{p.parents[1].name}/{p.stem}")
def test_a_trial_written_before_outcomes_re_judges_to_its_verdict(path: Path):
    doc = json.loads(path.read_text(encoding="utf-8"))
    record = Trial.read(doc)
    assert all(d.sender_outcome is None and d.handler_outcome is None for d in record.deliveries)
    again = rejudge(record)
    assert (again.verdict, again.error) == (record.verdict, record.error)
    assert [v.dump() for v in again.violations] == [v.dump() for v in record.violations]


def test_the_old_bundles_hold_the_outcomes_their_text_words():
    deliveries = [Delivery.read(d) for p in OLD_TRIALS for d in json.loads(p.read_text())["deliveries"]]
    timed_out = [d for d in deliveries if d.error]
    assert timed_out  # timeout-overlap's first attempts: the sender's timeout fired
    assert {(d.sender_saw, d.sender_timed_out) for d in timed_out} == {("timed-out", True)}
    assert all(d.handler_gave == "answered" for d in deliveries if d.status is not None)


# main's predicates, verbatim (before outcomes were recorded): the legacy reader must agree with them.
def main_hung(d: dict[str, Any]) -> bool:
    return d["status"] is None and "handler: ReadTimeout" in (d["error"] or "")


def main_unreachable(d: dict[str, Any]) -> bool:
    error = d["error"] or ""
    return d["status"] is None and ("ConnectError" in error or "ConnectTimeout" in error)


def main_sender_timed_out(d: dict[str, Any]) -> bool:
    return d["sender_status"] is None and (d["error"] or "").startswith("sender: timeout")


def main_failure(d: dict[str, Any], faulted: bool) -> bool:
    """main's test of an attempt that says the handler failed (booting aside)."""
    return not main_unreachable(d) and (
        (d["sender_status"] is not None and d["sender_status"] == d["status"])
        or (not faulted and (main_sender_timed_out(d) or (d["status"] is None and bool(d["error"]))))
        or main_hung(d)
    )


# Records as main wrote them: each side an answer or the words of what ended it (records.error's shape).
HANDLER_SIDES = [
    (200, None),
    (500, None),
    (None, "ReadTimeout: no answer within the lab's 30 s per delivery"),
    (None, "WriteTimeout: the handler read nothing"),
    (None, "ConnectError: [Errno 111] Connection refused"),
    (None, "ConnectTimeout"),
    (None, "RemoteProtocolError: Server disconnected without sending a response."),
    (None, "no answer reached the lab"),
]
SENDER_SIDES = [
    (200, None),
    (504, None),
    (500, None),
    (None, "timeout: sender timed out after 0.131 s"),
    (None, "ReadError: connection reset by peer after the request was sent (fault reset)"),
    (
        None,
        "RemoteProtocolError: the lab killed the service after its answer and withheld the answer (killed-after-answer)",
    ),
    (None, "ConnectError: [Errno 111] Connection refused"),
    (None, "RuntimeError: something else"),
]


def main_record(
    handler: tuple[int | None, str | None], sender: tuple[int | None, str | None]
) -> dict[str, Any]:
    parts = [f"sender: {sender[1]}"] if sender[1] else []
    parts += [f"handler: {handler[1]}"] if handler[1] else []
    return {"status": handler[0], "sender_status": sender[0], "error": "; ".join(parts) or None}


RECORDS = [main_record(h, s) for h in HANDLER_SIDES for s in SENDER_SIDES]
# A record with nothing on either side (a test's hand-made try that never got an answer): no evidence.
RECORDS.append({"status": None, "sender_status": None, "error": None})


@pytest.mark.parametrize("fault", ["none", "lost-ack"])
@pytest.mark.parametrize("raw", RECORDS, ids=lambda r: f"{r['status']}-{r['sender_status']}-{r['error']}")
def test_the_legacy_reader_reads_old_text_as_mains_verdicts_did(raw, fault):
    status, sender_status, error = raw["status"], raw["sender_status"], raw["error"]
    sender, handler = legacy_outcomes(status, sender_status, error)
    delivery = Delivery.model_construct(
        status=status, sender_status=sender_status, error=error, fault=fault, service_ready=None,
        sender_outcome=None, handler_outcome=None,
    )  # fmt: skip
    assert (delivery.sender_saw, delivery.handler_gave) == (sender, handler)
    assert hung(delivery) == main_hung(raw)
    assert unreachable(delivery) == main_unreachable(raw)
    assert delivery.sender_timed_out == main_sender_timed_out(raw)
    assert (role_of(delivery) == "failure") == main_failure(raw, faulted=fault != "none")


def _request() -> httpx.Request:
    return httpx.Request("POST", "http://127.0.0.1:9/hooks")


@pytest.mark.parametrize(
    ("failure", "sender", "handler"),
    [
        (httpx.ReadTimeout("slow", request=_request()), "timed-out", "timed-out"),
        (httpx.WriteTimeout("slow", request=_request()), "timed-out", "timed-out"),
        (httpx.ConnectTimeout("no syn-ack", request=_request()), "timed-out", "refused"),
        (httpx.ConnectError("refused", request=_request()), "refused", "refused"),
        (httpx.RemoteProtocolError("closed", request=_request()), "reset", "reset"),
        (httpx.ReadError("reset", request=_request()), "reset", "reset"),
        (httpx.UnsupportedProtocol("gopher", request=_request()), "error", "error"),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, BaseException) else v,
)
def test_an_exception_becomes_an_outcome_once_on_each_side(failure, sender, handler):
    assert outcome_of(failure, sender=True) == sender
    assert outcome_of(failure, sender=False) == handler
    record = DeliveryRecord(0, "evt_1", 1, "original", "none", {}, b"{}")
    record.finish_handler(status=None, latency_ms=1.0, failure=failure)
    record.finish_sender(status=None, failure=failure)
    document = record.document()
    assert (document.sender_outcome, document.handler_outcome) == (sender, handler)
    assert document.error  # the words stay, for people


def test_a_record_says_answered_for_a_status_and_cut_by_lab_where_the_lab_ended_it():
    record = DeliveryRecord(0, "evt_1", 1, "original", "none", {}, b"{}")
    record.finish_sender(status=504)
    document = record.document()  # the handler's answer never reached the lab: it stopped waiting
    assert (document.sender_outcome, document.handler_outcome) == ("answered", "cut-by-lab")
    assert document.error == "handler: no answer reached the lab"
    reset = DeliveryRecord(1, "evt_1", 1, "original", "reset", {}, b"{}")
    reset.cut_by_lab = True  # what Exchange.cut marks when the lab's fault raises at the sender
    reset.finish_sender(status=None, failure=httpx.ReadError("reset (fault reset)", request=_request()))
    reset.finish_handler(status=200, latency_ms=1.0)
    assert (reset.document().sender_outcome, reset.document().handler_outcome) == ("cut-by-lab", "answered")
