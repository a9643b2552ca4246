"""Synchronised bursts: the same bytes as the transport, errors for half-sent closes, HTTP/2 or a refusal.

The servers see what arrives (`tests/harness/burst_servers.py`): a raw server records every
request's bytes, hypercorn serves HTTP/2, uvicorn speaks HTTP/1.1 only.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from acklab.harness.core.bursts import Burst, send_burst
from acklab.harness.core.lab import Lab
from acklab.harness.core.plan import RunSettings, TrialPlan, event_ids
from acklab.harness.core.trial import TrialContext
from acklab.harness.engine.runner import RunOptions, run
from acklab.harness.errors import Http2Refused
from acklab.harness.targets import Needs
from acklab.harness.targets.spec import load_target
from acklab.harness.wire.faults import NoFault
from tests.harness.burst_servers import HypercornServer, RawServer, capture_into, close_unanswered
from tests.harness.conftest import SECRET, SECRET_ENV, target_doc, write_spec
from tests.harness.handlers import CheckThenInsert, Receipt, handler_app


def http_effects_spec(tmp_path: Path, server: RawServer | HypercornServer, endpoint: str) -> Path:
    doc = target_doc("raw", endpoint, "sqlite:///unused.db")
    doc["effects"] = {"http": {"url": server.url("/effects/{{event_id}}"), "json_path": "count"}}
    return write_spec(tmp_path / "raw.yaml", doc)


def duplicates(trial: TrialContext, n: int) -> list[tuple[Any, Any]]:
    """N deliveries of one event with the same bytes and signature, as concurrent-duplicates builds them."""
    event = trial.event(0)
    first, record = trial.prepare(event, kind="duplicate", attempt=1, fault=NoFault())
    prepared = [(first, record)]
    for _ in range(n - 1):
        request, twin = trial.prepare(event, kind="duplicate", attempt=1, fault=NoFault())
        twin.headers = record.headers
        request.headers.update(first.headers)
        prepared.append((request, twin))
    return prepared


def trial_on(lab: Lab) -> TrialContext:
    ids, orders = event_ids(7, "burst-test", 0, 1)
    return TrialContext(lab, TrialPlan("burst-test-0000", "burst-test", 0, ids, orders, ()))


def send_both_ways(spec: Path, sync: str, n: int = 4) -> tuple[list[Any], Burst]:
    """One delivery through the lab's transport, then n-1 byte-identical twins as a `sync` burst."""

    async def go() -> tuple[list[Any], Burst]:
        async with Lab.open(load_target(spec, allow_remote=False), Needs(socket=True), RunSettings()) as lab:
            trial = trial_on(lab)
            prepared = duplicates(trial, n)
            await trial.transmit(*prepared[0])
            burst = await send_burst(trial, prepared[1:], sync)
            await lab.transport.quiesce(10)
            return [record for _, record in prepared], burst

    return asyncio.run(go())


@pytest.fixture
def secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SECRET_ENV, SECRET)


@pytest.mark.usefixtures("secret")
def test_a_last_byte_burst_writes_exactly_the_bytes_the_transport_writes(tmp_path):
    seen: list[bytes] = []
    with RawServer(capture_into(seen)) as server:
        records, burst = send_both_ways(
            http_effects_spec(tmp_path, server, server.url("/hooks")), "last-byte"
        )
    transported, *bursted = seen
    assert len(bursted) == 3
    assert b"webhook-signature: v1," in transported  # headers, signature and body, byte for byte
    assert all(raw == transported for raw in bursted)
    # Recorded like every other delivery: status, headers, the bounded answer, the handler's clock.
    for record in records:
        doc = record.document().dump()
        assert (doc["status"], doc["sender_status"], doc["error"]) == (200, 200, None)
        assert (doc["response_excerpt"], doc["response_bytes"], doc["response_truncated"]) == ("{}", 2, False)
        assert doc["headers"] == records[0].document().dump()["headers"]
    assert burst.sync == "last-byte"
    assert burst.release_spread_ms is not None
    assert burst.handler_spread_ms is not None
    assert burst.facts()["handler_reported"] == 3


@pytest.mark.usefixtures("secret")
def test_a_single_packet_burst_sends_the_transports_headers_and_body_over_http2(tmp_path):
    seen: list[tuple[str, list[tuple[bytes, bytes]], bytes]] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        if scope["path"].startswith("/effects/"):
            content = b'{"count": 0}'
        else:
            seen.append((scope["http_version"], list(scope["headers"]), body))
            content = b"{}"
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": content})

    with HypercornServer(app) as server:
        records, burst = send_both_ways(
            http_effects_spec(tmp_path, server, server.url("/hooks")), "single-packet"
        )
    (h1_version, h1_headers, h1_body), *streams = seen
    assert h1_version == "1.1"
    assert [s[0] for s in streams] == ["2", "2", "2"]

    def comparable(headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
        # HTTP/2 carries Host as :authority and has no connection-specific headers (RFC 9113 8.2.2).
        return [(k, v) for k, v in headers if k not in (b"host", b"connection")]

    for _, headers, body in streams:
        assert comparable(headers) == comparable(h1_headers)
        assert body == h1_body
    assert dict(h1_headers)[b"host"] == dict(streams[0][1])[b"host"]
    assert [r.status for r in records] == [200] * 4
    assert burst.sync == "single-packet"
    assert burst.release_spread_ms == 0.0  # one write: one packet


@pytest.mark.slow
@pytest.mark.usefixtures("secret")
def test_a_target_that_closes_half_sent_connections_never_passes(tmp_path):
    # The burst never lands (each request closed before it arrived whole): no pass is earned.
    # The sender's retries, sent whole, are closed unanswered too: that is the handler's own
    # failure to acknowledge (docs/acknowledgement.md), so the verdict is a fail, never a pass nor a lab error.
    with RawServer(close_unanswered) as server:
        spec = http_effects_spec(tmp_path, server, server.url("/hooks"))
        result = run(
            RunOptions(
                target=str(spec),
                experiments=("concurrent-duplicates",),
                trials=1,
                out=tmp_path / "out",
                journal=False,
                settings=RunSettings(burst=4),
            )
        )
    (entry,) = result.run["experiments"]
    assert (result.verdict, entry["verdict"], int(result.exit_code)) == ("fail", "fail", 1)
    assert {v["invariant"] for v in entry["violations"]} == {"eventually-acknowledged"}
    assert entry["fault_landed"] == 0
    incident = json.loads((result.bundle / entry["incident"]).read_text())
    (trial,) = incident["trials"]
    assert all(d["status"] is None for d in trial["deliveries"])
    # A retry the server closed with part of it unread is reset rather than closed: a ReadError.
    assert all(
        "closed the connection" in d["error"]
        or "without sending a response" in d["error"]
        or d["error"].startswith("sender: ReadError")
        for d in trial["deliveries"]
    )
    tries = trial["fault"]["tries"]
    assert not any(t["landed"] for t in tries)
    assert any("half-sent" in t["evidence"] and t["facts"]["closed_half_sent"] >= 1 for t in tries)


@pytest.mark.slow
@pytest.mark.usefixtures("secret")
@pytest.mark.parametrize(
    # A 10 ms check-then-insert window: this judges the HTTP/2 path, not how sharp the release is
    # (bench/race_sharpness.py measures that); a 1 ms window served in this process missed once.
    ("variant", "verdict"),
    [(CheckThenInsert(work_s=0.01), "fail"), (Receipt(), "pass")],
)
def test_concurrent_duplicates_over_http2_judges_a_real_http2_server(tmp_path, variant, verdict):
    db_url = f"sqlite:///{tmp_path / 'h2.db'}"
    with HypercornServer(handler_app(variant, db_url, SECRET)) as server:
        spec = write_spec(tmp_path / "h2.yaml", target_doc("h2", server.url("/hooks"), db_url))
        result = run(
            RunOptions(
                target=str(spec),
                experiments=("concurrent-duplicates",),
                trials=2,
                out=tmp_path / "out",
                journal=False,
                settings=RunSettings(burst_sync="single-packet"),
            )
        )
    (entry,) = result.run["experiments"]
    assert entry["verdict"] == verdict, entry
    assert entry["arrival_spread"]["burst_sync"] == "single-packet"
    assert entry["arrival_spread"]["release_ms"]["max"] == 0.0
    assert entry["arrival_spread"]["handler_ms"]["p50"] >= 0


@pytest.mark.usefixtures("secret")
def test_single_packet_is_refused_with_exit_3_when_the_target_speaks_only_http1(serve_handler, tmp_path):
    spec = serve_handler(Receipt(), name="uvicorn-h1")  # uvicorn: HTTP/1.1 only
    options = RunOptions(
        target=str(spec),
        experiments=("concurrent-duplicates",),
        out=tmp_path / "out",
        journal=False,
        settings=RunSettings(burst_sync="single-packet"),
    )
    with pytest.raises(Http2Refused) as refused:
        run(options)
    assert refused.value.exit_code == 3
    message = str(refused.value)
    assert "does not speak HTTP/2" in message
    assert "--burst-sync last-byte" in message
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())  # nothing written


def acklab(*argv: str) -> int:
    from acklab.cli import main

    with pytest.raises(SystemExit) as exited:
        main(list(argv))
    return int(exited.value.code or 0)


def test_the_fixture_refuses_single_packet_with_exit_3_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "out"
    argv = ("--target", "fixture:live", "--burst-sync", "single-packet", "--out", str(out))
    assert acklab("run", "--experiment", "concurrent-duplicates", *argv, "--json") == 3
    printed = json.loads(capsys.readouterr().out)
    assert printed["verdict"] == "error"
    assert "does not speak HTTP/2 (the fixture is served by uvicorn" in printed["error"]
    assert acklab("explore", "--budget", "1", "--target", "fixture:live", "--burst-sync", "single-packet",
                  "--out", str(out)) == 3  # fmt: skip
    assert "single-packet" in capsys.readouterr().err
    assert not out.exists() or not any(out.glob("*/run.json"))


def test_burst_sync_is_checked_on_the_command_line_and_in_an_experiment_spec(tmp_path, capsys):
    assert acklab("plan", "--experiment", "concurrent-duplicates", "--burst-sync", "sideways") == 2
    assert "'sideways' is not one of 'none', 'last-byte', 'single-packet'" in capsys.readouterr().err
    doc = {"apiVersion": "acklab/v1", "kind": "experiment", "name": "naive", "uses": "concurrent-duplicates"}
    spec = tmp_path / "naive.yaml"
    spec.write_text(json.dumps({**doc, "parameters": {"burst_sync": "sideways"}}))
    assert acklab("plan", "--experiment", str(spec)) == 3
    assert "parameters.burst_sync: got 'sideways'" in capsys.readouterr().err
    spec.write_text(json.dumps({**doc, "parameters": {"burst_sync": "none"}}))
    assert acklab("plan", "--experiment", str(spec), "--json") == 0
    assert json.loads(capsys.readouterr().out)["parameters"]["burst_sync"] == "none"


def test_what_a_handler_says_of_its_clock_is_read_only_when_it_is_a_number():
    from acklab.harness.wire.transports import entered_ns

    assert entered_ns(httpx.Headers({"x-acklab-entered-ns": "123456789"})) == 123456789
    fullwidth_digits = "\uff10\uff11".encode()  # digits to str.isdigit, not to the lab
    for hostile in ("-1", "1e9", "12 34", "9" * 21, "", fullwidth_digits):
        value = hostile if isinstance(hostile, bytes) else hostile.encode()
        assert entered_ns(httpx.Headers({b"x-acklab-entered-ns": value})) is None, hostile


def test_the_run_summary_says_how_close_together_each_experiments_bursts_arrived():
    from acklab.evidence.documents.incident import ArrivalSpread
    from acklab.evidence.documents.run import RunDocument, RunExperiment
    from acklab.evidence.documents.trial import Trial
    from acklab.harness.cli.progress import spread_lines
    from tests.evidence.factories import T0, T1
    from tests.evidence.factories import trial as trial_doc

    def trial(index: int, *tries: dict[str, Any]) -> Trial:
        doc = trial_doc("r1", "concurrent-duplicates", index)
        numbered = [{"try": n, "event_ids": [], "evidence": "x"} | t for n, t in enumerate(tries, 1)]
        if tries:
            doc["fault"] = {
                "name": "concurrent-duplicates",
                "landed": any(t["landed"] for t in tries),
                "tries": numbered,
            }
        return Trial.read(doc)

    missed = {"landed": False, "facts": {"burst_sync": "last-byte", "release_spread_ms": 9.0}}
    landed = {
        "landed": True,
        "facts": {"burst_sync": "last-byte", "release_spread_ms": 0.1, "handler_spread_ms": 3.0},
    }
    quiet = {"landed": True, "facts": {"burst_sync": "last-byte", "release_spread_ms": 0.3}}
    spread = ArrivalSpread.of([trial(0, missed, landed), trial(1, quiet), trial(2)])
    assert spread is not None
    # Each trial counts by the try its proof rests on (the landed one), not by its misses; the
    # p50 is the one of every figure acklab reports (nearest rank: a spread that happened).
    assert spread.dump() == {
        "burst_sync": "last-byte",
        "bursts": 2,
        "release_ms": {"p50": 0.1, "max": 0.3},
        "handler_ms": {"p50": 3.0, "max": 3.0},
    }
    assert ArrivalSpread.of([trial(0, {"landed": True, "facts": {"at_handler_together": 2}})]) is None
    entry = RunExperiment.skipped("lost-ack", "not this time")
    run = RunDocument.build(
        run_id="r1", target="fixture:live", seed=7, status="complete", started_at=T0, ended_at=T1,
        experiments=[entry.but(name="concurrent-duplicates", arrival_spread=spread), entry],
        acklab_version="0",
    )  # fmt: skip
    assert spread_lines(run) == [
        "concurrent-duplicates: 2 bursts released last-byte; sender release p50 0.100 ms (max 0.300); "
        "handler arrival p50 3.000 ms (max 3.000)"
    ]


def _realtime_allowed() -> bool:
    """Whether this process may raise a thread to SCHED_FIFO (root, or RLIMIT_RTPRIO), asked in a
    thread of its own so the test's own thread is never changed."""
    import os
    import threading

    allowed: list[bool] = []

    def ask() -> None:
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
        except OSError:
            allowed.append(False)
        else:
            allowed.append(True)

    thread = threading.Thread(target=ask)
    thread.start()
    thread.join()
    return allowed[0]


def test_the_release_loop_runs_at_real_time_priority_where_allowed_and_returns_to_its_own():
    import os

    from acklab.harness.wire.burst_h1 import unpreempted

    before = (os.sched_getscheduler(0), os.sched_getparam(0).sched_priority)
    with unpreempted() as realtime:
        inside = os.sched_getscheduler(0)
    assert realtime is _realtime_allowed()
    assert inside == (os.SCHED_FIFO if realtime else before[0])
    assert (os.sched_getscheduler(0), os.sched_getparam(0).sched_priority) == before


def test_a_release_the_os_keeps_at_normal_priority_still_goes_out_and_says_so(tmp_path, monkeypatch):
    import os

    def refused(*args: Any) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setenv(SECRET_ENV, SECRET)
    monkeypatch.setattr(os, "sched_setscheduler", refused)
    seen: list[bytes] = []
    with RawServer(capture_into(seen)) as server:
        records, burst = send_both_ways(
            http_effects_spec(tmp_path, server, server.url("/hooks")), "last-byte"
        )
    assert len(seen) == 4
    assert all(r.status == 200 for r in records)
    assert burst.facts()["release_priority"] == "normal"


@pytest.mark.usefixtures("secret")
def test_a_burst_says_how_its_release_loop_was_scheduled(tmp_path):
    seen: list[bytes] = []
    with RawServer(capture_into(seen)) as server:
        _, burst = send_both_ways(http_effects_spec(tmp_path, server, server.url("/hooks")), "last-byte")
    assert burst.facts()["release_priority"] == ("real-time" if _realtime_allowed() else "normal")
    assert "release_priority" not in Burst((), "none").facts()


def test_a_thread_already_at_real_time_priority_keeps_its_own():
    import os
    import threading

    from acklab.harness.wire.burst_h1 import unpreempted

    if not _realtime_allowed():
        pytest.fail("this test needs SCHED_FIFO (root or RLIMIT_RTPRIO), as make test runs")
    seen: list[tuple[bool, int, int]] = []

    def at_fifo_5() -> None:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(5))
        with unpreempted() as realtime:
            inside = os.sched_getparam(0).sched_priority
        seen.append((realtime, inside, os.sched_getparam(0).sched_priority))
        os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))

    thread = threading.Thread(target=at_fifo_5)
    thread.start()
    thread.join()
    assert seen == [(True, 5, 5)]
