"""The sinks themselves: real SMTP and HTTP clients against them, on loopback."""

from __future__ import annotations

import json
import smtplib
import socket
from email.message import EmailMessage

import httpx
import pytest

from acklab.evidence.redaction import redact
from acklab.harness.engine.runner import RunOptions, run
from acklab.harness.errors import HarnessError, SpecError
from acklab.harness.ports import free_port
from acklab.harness.sinks import SinkLimits, Sinks, sink_configs
from acklab.harness.targets.fixture import fixture_target


def _sinks(rows: dict[str, int], limits: SinkLimits | None = None) -> Sinks:
    smtp, outbound = sink_configs(
        {
            "smtp": {"listen": f"127.0.0.1:{free_port()}", "match": "{{order_id}}"},
            "outbound": {
                "listen": f"127.0.0.1:{free_port()}",
                "idempotency_header": "Idempotency-Key",
                "routes": [
                    {"method": "POST", "path": "/v1/refunds", "match": "{{order_id}}",
                     "respond": {"status": 200, "json": {"id": "re_{{seq}}", "order": "{{order_id}}"}},
                     "first": {"drop": True}},
                    {"method": "GET", "path": "/v1/orders/{{object_id}}", "respond": {"status": 200, "json": {}}},
                ],
            },
        }
    )  # fmt: skip
    return Sinks(smtp, outbound, rows_now=lambda event_id, _object: rows.get(event_id, 0), limits=limits)


def _mail(port: int, subject: str, *, login: tuple[str, str] | None = None, body: str = "thanks") -> None:
    message = EmailMessage()
    message["From"], message["To"], message["Subject"] = "shop@example.test", "buyer@example.test", subject
    message.set_content(body)
    with smtplib.SMTP("127.0.0.1", port, timeout=5) as client:
        if login is not None:
            client.login(*login)
        client.send_message(message)


def test_emails_and_calls_are_counted_per_event_with_keys_and_the_rows_at_arrival():
    rows = {"evt_1": 0}
    sinks = _sinks(rows)
    sinks.start()
    try:
        sinks.register("evt_1", "ord_111", "ord_111")
        sinks.register("evt_2", "ord_222", "ord_222")
        assert sinks.smtp is not None
        assert sinks.outbound is not None
        smtp_port, api = sinks.smtp.config.port, f"http://127.0.0.1:{sinks.outbound.config.port}"
        _mail(smtp_port, "Receipt for ord_111", login=("shop-user", "smtp-pass-0123456789"))
        rows["evt_1"] = 1
        _mail(smtp_port, "Receipt for ord_111 (again)")
        with httpx.Client(base_url=api, timeout=5) as client:
            with pytest.raises(httpx.RemoteProtocolError):  # the first call for the event is dropped
                client.post("/v1/refunds", json={"order": "ord_111"}, headers={"Idempotency-Key": "k1",
                            "Authorization": "Bearer sk_live_abcdef0123456789"})  # fmt: skip
            retried = client.post("/v1/refunds", json={"order": "ord_111"}, headers={"Idempotency-Key": "k1"})
            fresh = client.post("/v1/refunds", json={"order": "ord_111"}, headers={"Idempotency-Key": "k2"})
            with pytest.raises(httpx.RemoteProtocolError):  # first for evt_2: dropped too
                client.post("/v1/refunds", json={"order": "ord_222"})
            keyless = client.post("/v1/refunds", json={"order": "ord_222"})
            read = client.get("/v1/orders/ord_222")
            missing = client.post("/v1/nowhere", json={})
        assert (retried.status_code, retried.json()) == (200, {"id": "re_1", "order": "ord_111"})
        assert fresh.json()["id"] == "re_2"
        assert keyless.status_code == 200
        assert read.status_code == 200
        assert missing.status_code == 404
        one, two = sinks.tally("evt_1"), sinks.tally("evt_2")
        # two emails; three calls with two keys: two refunds downstream; only the first email came before the commit
        assert (one.emails, one.calls, one.call_keys, one.before_commit) == (2, 2, ("k1", "k1", "k2"), 1)
        # each keyless call is one effect (the dropped one reached the API too); the GET is a read
        assert (two.emails, two.calls, two.call_keys) == (0, 2, (None, None))
        docs = sinks.documents()
        dropped = docs["outbound"]["records"][0]
        assert dropped["status"] is None
        assert dropped["headers"]["authorization"] == "[redacted]"
        assert dropped["idempotency_key"] == "k1"
        assert dropped["rows_at_arrival"] == {"evt_1": 1}
        assert docs["smtp"]["records"][0]["rows_at_arrival"] == {"evt_1": 0}
        assert [r["route"] for r in docs["outbound"]["records"]] == [0, 0, 0, 0, 0, 1, None]
        # the credentials the consumer sent are secrets of the process from now on
        assert "smtp-pass-0123456789" not in redact("pw smtp-pass-0123456789")
        assert "sk_live_abcdef0123456789" not in redact("Bearer sk_live_abcdef0123456789")
    finally:
        sinks.stop()


def test_a_message_or_call_past_the_limits_is_capped_and_recorded_so():
    sinks = _sinks({}, SinkLimits(max_bytes=4096, max_records=3))
    sinks.start()
    try:
        sinks.register("evt_1", "ord_111", "ord_111")
        assert sinks.smtp is not None
        assert sinks.outbound is not None
        with pytest.raises(smtplib.SMTPException):
            _mail(sinks.smtp.config.port, "big ord_111", body="x" * 10_000)
        with httpx.Client(base_url=f"http://127.0.0.1:{sinks.outbound.config.port}", timeout=5) as client:
            big = client.post("/v1/refunds", content=b"ord_111" + b"y" * 10_000)
            with pytest.raises(httpx.RemoteProtocolError):  # the route drops the event's first call
                client.post("/v1/refunds", json={"order": "ord_111"})
            for _ in range(2):
                client.post("/v1/refunds", json={"order": "ord_111"})
        assert big.status_code == 413
        docs = sinks.documents()
        assert docs["smtp"]["records"][0]["capped"] is True
        assert docs["smtp"]["records"][0]["events"] == []
        assert docs["outbound"]["capped"] == 1
        assert docs["outbound"]["dropped"] == 2
        assert len(docs["outbound"]["records"]) == 2
    finally:
        sinks.stop()


def test_a_sink_listens_on_loopback_only_and_a_taken_port_is_a_lab_error():
    with pytest.raises(SpecError, match="loopback"):
        sink_configs({"smtp": {"listen": "0.0.0.0:2525"}})
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        for doc in ({"smtp": {"listen": f"127.0.0.1:{port}"}},
                    {"outbound": {"listen": f"127.0.0.1:{port}", "routes": [{"path": "/"}]}}):  # fmt: skip
            sinks = Sinks(*sink_configs(doc))
            with pytest.raises(HarnessError, match="could not listen"):
                sinks.start()


@pytest.mark.slow
def test_the_fixture_tells_the_world_once_after_the_commit_and_the_unsafe_handler_before_it_unkeyed(tmp_path):
    verdicts = {}
    for handler in ("unsafe", "live"):
        target = fixture_target(f"fixture:{handler}", db_url=None)
        target.start_sinks()
        result = run(
            RunOptions(target=target.name, experiments=("lost-ack",), trials=1, seed=7, out=tmp_path / handler,
                       journal=False),
            target=target,
        )  # fmt: skip
        (entry,) = result.document.experiments
        verdicts[handler] = {(v.invariant, v.source) for v in entry.violations}
        trial = json.loads(next((result.bundle / "trials").glob("*.json")).read_text())
        final = next(o for o in trial["observations"] if o["note"] == "final")
        if handler == "live":
            assert (final["effects"], final["emails"], final["calls"], final["call_keys"]) == (
                1, 1, 1, [trial["event_ids"][0]],
            )  # fmt: skip
            assert final["sent_before_commit"] == 0
    assert verdicts["live"] == set()
    assert {("at-most-once-effect", "emails"), ("at-most-once-effect", "calls"),
            ("idempotent-outbound", None)} <= verdicts["unsafe"]  # fmt: skip


@pytest.mark.slow
def test_the_fixture_served_as_a_process_for_crashes_tells_the_same_sinks(tmp_path):
    # crash-after-commit serves the fixture as a process of its own (killed and restarted): it is
    # handed the sinks' ports, so its emails and shipments are counted as the in-process fixture's.
    verdicts = {}
    for handler in ("unsafe", "live"):
        target = fixture_target(f"fixture:{handler}", db_url=None)
        sinks = target.start_sinks()
        result = run(
            RunOptions(target=target.name, experiments=("crash-after-commit",), trials=1, seed=7,
                       out=tmp_path / handler, journal=False),
            target=target,
        )  # fmt: skip
        (entry,) = result.document.experiments
        assert entry.fault_landed == 1
        verdicts[handler] = {(v.invariant, v.source) for v in entry.violations}
        trial = json.loads(next((result.bundle / "trials").glob("*.json")).read_text())
        final = next(o for o in trial["observations"] if o["note"] == "final")
        assert (final["emails"], final["calls"]) == ((1, 1) if handler == "live" else (2, 2))
        assert sinks.tally(trial["event_ids"][0]).emails == final["emails"]
    assert verdicts["live"] == set()
    assert {("at-most-once-effect", "emails"), ("at-most-once-effect", "calls")} <= verdicts["unsafe"]
