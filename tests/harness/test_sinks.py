"""The sinks themselves: real SMTP and HTTP clients against them, on loopback."""

from __future__ import annotations

import asyncio
import contextlib
import json
import smtplib
import socket
from collections.abc import Iterator
from datetime import UTC, datetime
from email.message import EmailMessage
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

import acklab
from acklab.evidence.redaction import redact
from acklab.harness.engine.runner import RunOptions, run
from acklab.harness.errors import HarnessError, SpecError
from acklab.harness.ports import free_port
from acklab.harness.procs.pgtemp import PostgresServer
from acklab.harness.sinks import SinkLimits, Sinks
from acklab.harness.sinks import sink_configs as configs_of
from acklab.harness.specs.target import SINK_SECTIONS
from acklab.harness.targets.fixture import fixture_target


def sink_configs(effects: dict) -> dict:
    """The sink configurations of a spec's ``effects:`` sinks (each section read by its model)."""
    return configs_of({name: SINK_SECTIONS[name].model_validate(doc) for name, doc in effects.items()})


def _sinks(rows: dict[str, int], limits: SinkLimits | None = None) -> Sinks:
    configs = sink_configs(
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
    return Sinks(configs, rows_now=lambda event_id, _object: rows.get(event_id, 0), limits=limits)


@contextlib.contextmanager
def _api(sinks: Sinks, *events: tuple[str, str]) -> Iterator[httpx.Client]:
    """`sinks` started with `events` (event id, order id) registered, and a client of their
    outbound API; stopped after."""
    sinks.start()
    try:
        for event_id, order_id in events:
            sinks.register(event_id, order_id, order_id)
        api = sinks.url("outbound")
        assert api is not None
        with httpx.Client(base_url=api, timeout=5) as client:
            yield client
    finally:
        sinks.stop()


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
        smtp_port, api = sinks.port("smtp"), sinks.url("outbound")
        assert smtp_port is not None
        assert api is not None
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
        assert (one.counts, one.keys, one.before_commit) == ({"emails": 2, "calls": 2}, ("k1", "k1", "k2"), 1)
        # each keyless call is one effect (the dropped one reached the API too); the GET is a read
        assert (two.counts, two.keys) == ({"emails": 0, "calls": 2}, (None, None))
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
        smtp_port, api = sinks.port("smtp"), sinks.url("outbound")
        assert smtp_port is not None
        assert api is not None
        with pytest.raises(smtplib.SMTPException):
            _mail(smtp_port, "big ord_111", body="x" * 10_000)
        with httpx.Client(base_url=api, timeout=5) as client:
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
            sinks = Sinks(sink_configs(doc))
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
        assert sinks.tally(trial["event_ids"][0]).counts["emails"] == final["emails"]
    assert verdicts["live"] == set()
    assert {("at-most-once-effect", "emails"), ("at-most-once-effect", "calls")} <= verdicts["unsafe"]


def test_duplicates_past_the_record_cap_still_count_and_the_trials_since_are_told(tmp_path):
    # The attack: junk fills the records first (10 000 by default; 5 here), then the duplicate
    # receipts arrive. Counted anyway; their records are gone, and a trial since then says so.
    sinks = _sinks({}, SinkLimits(max_records=5))
    sinks.start()
    try:
        sinks.register("evt_1", "ord_111", "ord_111")
        smtp_port = sinks.port("smtp")
        assert smtp_port is not None
        before = datetime.now(UTC)
        with smtplib.SMTP("127.0.0.1", smtp_port, timeout=5) as client:
            for n in range(5):
                client.sendmail("x@example.test", ["y@example.test"], f"Subject: junk {n}\r\n\r\nnothing\r\n")
        for _ in range(2):
            _mail(smtp_port, "Receipt for ord_111")
        assert (sinks.tally("evt_1").counts["emails"], sinks.ledger.dropped["smtp"]) == (2, 2)
        assert not [r for r in sinks.ledger.records() if r.events]  # not one of them was kept
        told = sinks.unread_since(before)
        assert told is not None
        assert "could not keep 2" in told
        assert sinks.unread_since(datetime.now(UTC)) is None  # a trial started after it has all its records
    finally:
        sinks.stop()


def test_an_order_whose_id_another_extends_is_neither_counted_nor_answered_for_it():
    # The explorer's lifecycle object is "<order_id>lc": its calls once counted for <order_id>
    # (a false duplicate) and were answered with <order_id>'s object.
    sinks = _sinks({})
    with _api(sinks, ("evt_1", "ord_111"), ("evt_1-lc0", "ord_111lc")) as client:
        with pytest.raises(httpx.RemoteProtocolError):  # the route drops each event's first call
            client.post("/v1/refunds", json={"order": "ord_111lc"}, headers={"Idempotency-Key": "a"})
        answer = client.post("/v1/refunds", json={"order": "ord_111lc"}, headers={"Idempotency-Key": "a"})
        client.get("/v1/orders/ord_111lc")
        assert answer.json() == {"id": "re_1", "order": "ord_111lc"}
        assert (sinks.tally("evt_1").counts["calls"], sinks.tally("evt_1-lc0").counts["calls"]) == (0, 1)
        records = sinks.documents()["outbound"]["records"]
        assert [r["events"] for r in records] == [["evt_1-lc0"]] * 3


def test_what_the_keys_show_beyond_the_first_twenty_calls_is_still_judged():
    sinks = _sinks({})
    with _api(sinks, ("evt_1", "ord_111")) as client:
        with pytest.raises(httpx.RemoteProtocolError):
            client.post("/v1/refunds", json={"order": "ord_111"}, headers={"Idempotency-Key": "k1"})
        for _ in range(24):
            client.post("/v1/refunds", json={"order": "ord_111"}, headers={"Idempotency-Key": "k1"})
        client.post("/v1/refunds", json={"order": "ord_111"})  # the 26th: no key
        client.post("/v1/refunds", json={"order": "ord_111"}, headers={"Idempotency-Key": "k2"})
        told = sinks.tally("evt_1")
        assert told.keys is not None
        assert (told.counts["calls"], told.received, len(told.keys)) == (3, 27, 20)
        assert None in told.keys
        assert "k2" in told.keys


def _flooding_shop(smtp_port: int, *, every_delivery: bool, junk: int) -> tuple[Starlette, Any]:
    """A shop that mails a receipt per new order (or per delivery); before its first receipt it
    sends `junk` messages that name no order (the flood that fills the sink's records)."""
    orders: set[str] = set()

    def mail(order_id: str, flood: int) -> None:
        with smtplib.SMTP("127.0.0.1", smtp_port, timeout=5) as client:
            for n in range(flood):
                client.sendmail("shop@example.test", ["x@example.test"], f"Subject: news {n}\r\n\r\nsale\r\n")
            message = EmailMessage()
            message["From"], message["To"], message["Subject"] = (
                "shop@example.test",
                "b@example.test",
                "Receipt",
            )
            message.set_content(f"Your order {order_id}", cte="base64")
            client.send_message(message)

    async def receive(request: Request) -> Response:
        event = json.loads(await request.body())
        new = event["id"] not in orders
        orders.add(event["id"])
        if new or every_delivery:
            await asyncio.to_thread(mail, event["data"]["order_id"], junk if len(orders) == 1 and new else 0)
        return Response(status_code=200)

    return Starlette(routes=[Route("/webhooks", receive, methods=["POST"])]), lambda e: int(e in orders)


@pytest.mark.slow
def test_a_run_whose_sink_dropped_records_fails_a_duplicate_and_never_passes_the_rest(tmp_path):
    verdicts = {}
    for every_delivery in (True, False):
        configs = sink_configs({"smtp": {"listen": f"127.0.0.1:{free_port()}", "match": "{{order_id}}"}})
        sinks = Sinks(configs, limits=SinkLimits(max_records=3))
        sinks.start()
        try:
            assert sinks.smtp_port is not None
            app, count = _flooding_shop(sinks.smtp_port, every_delivery=every_delivery, junk=5)
            result = acklab.attack(app, endpoint="/webhooks", signing="none", effects=count, sinks=sinks,
                                   experiments=["lost-ack"], trials=2, seed=3, out=tmp_path / str(every_delivery),
                                   journal=False)  # fmt: skip
        finally:
            sinks.stop()
        (entry,) = result.experiments
        verdicts[every_delivery] = entry.verdict
        trials = [json.loads(p.read_text()) for p in sorted((result.bundle / "trials").glob("*.json"))]
        assert all("could not keep" in (t["error"] or "") for t in trials)
        if every_delivery:
            found = {
                (v["invariant"], v.get("source"), v["observed"]) for t in trials for v in t["violations"]
            }
            assert found == {("at-most-once-effect", "emails", 2)}
        else:
            assert [t["verdict"] for t in trials] == ["error", "error"]
    assert verdicts == {True: "fail", False: "error"}


def _sent(port: int, to: str, subject: str, body: str) -> None:
    message = EmailMessage()
    message["From"], message["To"], message["Subject"] = "shop@example.test", to, subject
    message.set_content(body)
    with smtplib.SMTP("127.0.0.1", port, timeout=5) as client:
        client.send_message(message)


@pytest.mark.parametrize(
    ("match", "counted"),
    [
        ("{{order_id}}", {"evt_1": 3, "evt_12": 1}),  # the staff copy and the order list name ord_1 too
        (
            {"to": "buyer-{{order_id}}@shop\\.example", "subject": "^Your receipt for order {{order_id}}$"},
            {"evt_1": 1, "evt_12": 1},
        ),
    ],
    ids=["identifier-anywhere", "recipient-and-subject"],
)
def test_a_match_can_name_the_recipient_and_the_subject(match, counted):
    sinks = Sinks(sink_configs({"smtp": {"listen": f"127.0.0.1:{free_port()}", "match": match}}))
    sinks.start()
    try:
        sinks.register("evt_1", "ord_1", "ord_1")
        sinks.register("evt_12", "ord_12", "ord_12")
        port = sinks.smtp_port
        assert port is not None
        _sent(port, "Buyer-ORD_1@shop.example", "Your receipt for order ord_1", "Total: 12.00 EUR")
        _sent(port, "warehouse@shop.example", "Pick list: ord_1", "ship ord_1 today")
        _sent(port, "buyer-ord_1@shop.example", "Orders this week", "ord_1, ord_5")
        _sent(port, "buyer-ord_12@shop.example", "Your receipt for order ord_12", "Total: 9.00 EUR")
        assert {e: sinks.tally(e).counts["emails"] for e in counted} == counted
    finally:
        sinks.stop()


def test_a_subject_pattern_that_is_not_a_regular_expression_is_refused_naming_it():
    with pytest.raises(
        SpecError, match=r"effects\.smtp\.match\.subject: got '\(receipt', which is not a regular"
    ):
        sink_configs({"smtp": {"listen": "127.0.0.1:2525", "match": {"subject": "(receipt"}}})


def test_the_fixture_s_sinks_close_their_database_connection_when_the_run_ends(
    pg_url: str, postgres_server: PostgresServer
) -> None:
    # The sinks read the fixture's fulfilments on PostgreSQL as a mail arrives; a connection left
    # in that pool is closed by the garbage collector, warning into whichever test runs then.
    database = pg_url.rsplit("/", 1)[1]

    def lab_connections() -> int:
        with postgres_server.connect() as admin:
            row = admin.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
                (database,),
            ).fetchone()
        return int(row[0]) if row is not None else 0

    target = fixture_target("fixture:live", db_url=pg_url)
    sinks = target.start_sinks()
    sinks.register("evt_1", "ord_111", "ord_111")
    smtp_port = sinks.port("smtp")
    assert smtp_port is not None
    _mail(smtp_port, "Receipt for ord_111")
    assert sinks.tally("evt_1").counts["emails"] == 1
    assert lab_connections() >= 1  # the read at arrival opened one
    asyncio.run(target.aclose())
    assert lab_connections() == 0
