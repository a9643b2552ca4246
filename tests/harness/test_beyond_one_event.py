"""Beyond one event: the spec sections, how an object's events are made, the burst of different
requests, and the built-in fixture failing (unsafe) and passing (live) the three experiments."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from acklab.harness.core.object_verdicts import state_value
from acklab.harness.engine.runner import RunOptions, run
from acklab.harness.experiments.ordering import VARIANTS, permutation
from acklab.harness.targets.objects import Competitor
from acklab.harness.targets.server import ThreadedServer
from acklab.harness.targets.spec import load_target
from acklab.harness.wire.burst_h1 import H1Burst
from acklab.harness.wire.templates import render, with_set
from tests.harness.conftest import SECRET, SECRET_ENV, target_doc, write_spec
from tests.harness.test_cli import acklab

LIFECYCLE = {
    "object": "sub_{{order_id}}",
    "events": [
        {
            "type": "customer.subscription.created",
            "set": {"data.status": "incomplete"},
            "state": "incomplete",
        },
        {"type": "customer.subscription.updated", "set": {"data.status": "active"}, "state": "active"},
    ],
}
STATE = "SELECT status FROM subscriptions WHERE stripe_id = :object_id"


def spec(tmp_path, monkeypatch, **changes):
    monkeypatch.setenv(SECRET_ENV, SECRET)
    doc = target_doc("subs", "http://127.0.0.1:9/hooks", f"sqlite:///{tmp_path}/subs.db")
    doc["event"]["data"]["status"] = "active"
    doc.update(changes)
    return write_spec(tmp_path / "subs.yaml", doc)


# -- the spec ---------------------------------------------------------------------------------


def test_a_spec_with_the_sections_loads_them_and_older_specs_stay_valid(tmp_path, monkeypatch):
    old = load_target(spec(tmp_path, monkeypatch), allow_remote=False)
    assert (old.objects.lifecycle, old.objects.siblings, old.objects.competitor) == ((), (), None)
    assert old.objects.object == "{{order_id}}"
    effects = {
        "sql": {
            "url": f"sqlite:///{tmp_path}/s.db",
            "count": "SELECT 1 WHERE :object_id = :event_id",
            "state": STATE,
        }
    }
    target = load_target(
        spec(
            tmp_path,
            monkeypatch,
            lifecycle=LIFECYCLE,
            siblings=[{"type": "invoice.payment_succeeded"}],
            competitor={"url": "/checkout/{{order_id}}/complete", "body": {"id": "{{object_id}}"}},
            effects=effects,
        ),
        allow_remote=False,
    )
    assert [e.state for e in target.objects.lifecycle] == ["incomplete", "active"]
    assert target.objects.order == "newest-wins"
    assert target.object_reads().count
    assert target.object_reads().state
    assert target.objects.competitor is not None
    assert target.objects.competitor.ok_status == (200, 201, 202, 204, 303, 409)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"lifecycle": {**LIFECYCLE, "object": "sub_1"}}, "must contain {{order_id}}"),
        (
            {"lifecycle": {"events": [{"type": "a", "state": "x"}, {"type": "b", "state": "x"}]}},
            "lifecycle.events[1].state: 'x' is also the state of lifecycle.events[0]",
        ),
        (
            {
                "lifecycle": {
                    "events": [
                        {"type": "a", "state": "x", "set": {"data.nope.status": 1}},
                        {"type": "b", "state": "y"},
                    ]
                }
            },
            "lifecycle.events[0].set: the path 'data.nope.status' stops at 'nope'",
        ),
        ({"siblings": [{"type": "x", "set": {"nope.a": 1}}]}, "siblings[0].set: the path 'nope.a'"),
        (
            {"expect": {"order": "arrival"}},
            "expect.order: 'arrival' says how a lifecycle's events are applied",
        ),
        ({"competitor": {"url": "/c/{{customer}}"}}, "competitor.url: {{customer}} is not a placeholder"),
        ({"competitor": {"url": "http://example.com/c"}}, "competitor.url"),
    ],
)
def test_sections_that_cannot_work_are_refused_naming_the_field(tmp_path, monkeypatch, changes, message):
    with pytest.raises(Exception) as refused:
        load_target(spec(tmp_path, monkeypatch, **changes), allow_remote=False)
    assert message in str(refused.value)
    assert acklab("validate", str(tmp_path / "subs.yaml")) in (3, 5)


def test_without_the_sections_the_experiments_are_listed_skipped_with_the_reason(
    tmp_path, monkeypatch, capsys
):
    path = spec(tmp_path, monkeypatch)
    assert acklab("plan", "--target", str(path), "--seed", "1", "--json") == 0
    skipped = {s["name"]: s["reason"] for s in json.loads(capsys.readouterr().out)["skipped"]}
    assert "no lifecycle: events" in skipped["out-of-order"]
    assert "no siblings: section" in skipped["sibling-events"]
    assert "no competitor: section" in skipped["race-with-request"]
    arrival = spec(tmp_path, monkeypatch, lifecycle=LIFECYCLE, expect={"order": "arrival"})
    assert acklab("plan", "--target", str(arrival), "--seed", "1", "--json") == 0
    skipped = {s["name"]: s["reason"] for s in json.loads(capsys.readouterr().out)["skipped"]}
    assert "expect.order: arrival" in skipped["out-of-order"]
    no_state = spec(tmp_path, monkeypatch, lifecycle=LIFECYCLE)
    assert acklab("run", "--target", str(no_state), "--experiment", "out-of-order") == 3
    assert "no state probe" in capsys.readouterr().err


def test_the_plan_of_the_fixture_lists_every_permutation(capsys):
    assert (
        acklab(
            "plan", "--target", "fixture:unsafe", "--experiment", "out-of-order", "--json", "--trials", "1"
        )
        == 0
    )
    (trial,) = json.loads(capsys.readouterr().out)["trials"]
    assert len(trial["event_ids"]) == 3 * len(VARIANTS) * 3  # three tries of four objects of three events
    assert [d["event"] for d in trial["deliveries"][:3]] == [2, 1, 0]  # reversed
    assert [d["kind"] for d in trial["deliveries"][6:10]] == ["original"] * 3 + ["retry"]  # stale-redelivery
    for name in ("sibling-events", "race-with-request"):
        assert acklab("plan", "--target", "fixture:unsafe", "--experiment", name, "--json") == 0
        planned = json.loads(capsys.readouterr().out)
        assert planned["experiments"] == [name]
    assert {d["kind"] for d in planned["trials"][0]["deliveries"]} == {"original", "competitor"}


def test_the_permutations():
    assert permutation("reversed", 3) == [2, 1, 0]
    assert permutation("newest-first", 3) == [2, 0, 1]
    assert permutation("stale-redelivery", 3) == [0, 1, 2, 0]
    assert permutation("same-second", 3) == [2, 1, 0]


# -- events and reads -------------------------------------------------------------------------


def test_a_lifecycle_event_is_the_event_with_its_set_its_type_and_its_own_time():
    template: dict[str, Any] = {
        "id": "{{event_id}}",
        "type": "x",
        "created": "{{event_time}}",
        "data": {"status": "?"},
    }
    derived = with_set(template, {"data.status": "{{order_id}}-active"}, event_type="sub.updated")
    event = render(
        derived,
        event_id="evt_1",
        order_id="ord_1",
        seq=1,
        created=datetime(2024, 1, 1, 0, 0, 5, tzinfo=UTC),
        object_template="sub_{{order_id}}",
    )
    assert event.document == {
        "id": "evt_1",
        "type": "sub.updated",
        "created": 1704067205,
        "data": {"status": "ord_1-active"},
    }
    assert (event.object_id, event.event_time) == ("sub_ord_1", 1704067205)
    assert template["data"]["status"] == "?"  # the spec's template is never changed


def test_a_competitor_fills_the_object_into_its_url_and_body():
    event = render(
        {"id": "{{event_id}}"}, event_id="evt_1", order_id="ord_1", seq=1, created=datetime.now(UTC)
    )
    competitor = Competitor(
        "POST", "/checkout/{{order_id}}/complete?o={{object_id}}", body={"order": "{{order_id}}"}
    )
    url, body = competitor.request_for(event, base="http://127.0.0.1:9/")
    assert url == "http://127.0.0.1:9/checkout/ord_1/complete?o=ord_1"
    assert json.loads(body or b"") == {"order": "ord_1"}


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ('[["active"]]', "active"),
        ('"active"', "active"),
        ("[]", None),
        ("null", None),
        ("[[3]]", "3"),
        ('[["a","b"]]', '[["a","b"]]'),
    ],
)
def test_a_state_read_matches_one_row_of_one_column(text, value):
    assert state_value(text) == value


def test_the_last_byte_burst_releases_different_requests_to_their_own_servers():
    """A webhook and the app's own request, to two servers, written but their last bytes, then released."""
    seen: list[tuple[str, bytes]] = []

    async def echo(request: Request) -> PlainTextResponse:
        seen.append((request.url.path, await request.body()))
        return PlainTextResponse(request.url.path)

    app = Starlette(routes=[Route("/{path:path}", echo, methods=["GET", "POST"])])
    first, second = ThreadedServer(app).start(), ThreadedServer(app).start()
    try:

        async def burst() -> list[int]:
            requests = [
                httpx.Request("POST", f"{first.url}/webhooks", content=b'{"id": "evt_1"}'),
                httpx.Request("GET", f"{second.url}/checkout/ord_1/complete"),
            ]
            armed = await H1Burst.arm(requests, timeout_s=5)
            armed.release()
            answers = [await w.response(r, 5) for w, r in zip(armed.wires, requests, strict=True)]
            for answer in answers:
                await answer.aread()
                await answer.aclose()
            return [a.status_code for a in answers]

        assert asyncio.run(burst()) == [200, 200]
    finally:
        first.stop()
        second.stop()
    assert sorted(seen) == [("/checkout/ord_1/complete", b""), ("/webhooks", b'{"id": "evt_1"}')]
    assert uvicorn  # served by uvicorn (ThreadedServer)


# -- the fixture ------------------------------------------------------------------------------


@pytest.mark.slow
def test_the_unsafe_fixture_breaks_all_three_and_the_live_one_keeps_them(tmp_path):
    names = ("out-of-order", "sibling-events", "race-with-request")
    unsafe = run(RunOptions(target="fixture:unsafe", experiments=names, trials=1, seed=5, out=tmp_path))
    got = {e["name"]: e for e in unsafe.run["experiments"]}
    assert {n: got[n]["verdict"] for n in names} == dict.fromkeys(names, "fail")
    assert {v["invariant"] for v in got["out-of-order"]["violations"]} == {
        "newest-state-wins",
        "state-never-regresses",
    }
    assert {v["invariant"] for v in got["sibling-events"]["violations"]} == {"at-most-once-per-object"}
    race = got["race-with-request"]["violations"]
    assert len(race) == 5  # three pairs together, both near misses: the unsafe browser return always fulfils
    assert all(v["delivery"] is not None for v in race)
    live = run(RunOptions(target="fixture:live", experiments=names, trials=1, seed=5, out=tmp_path))
    assert live.verdict == "pass", live.run["experiments"]
    assert all(e["fault_landed"] == 1 for e in live.run["experiments"])


@pytest.mark.slow
def test_out_of_order_is_judged_from_the_records_alone(tmp_path):
    """In-process (no socket): the unsafe fixture's records fail; the same records with the newest
    state read everywhere pass — the verdict is the records', re-judged."""
    from acklab.evidence.documents.trial import Trial
    from acklab.harness.engine.execute import rejudge

    result = run(
        RunOptions(target="fixture:unsafe", experiments=("out-of-order",), trials=1, seed=3, out=tmp_path)
    )
    (path,) = (result.bundle / "trials").glob("*.json")
    trial = Trial.read(json.loads(path.read_text()))
    assert trial.verdict == "fail"
    newest = {c.events[0].event_id: c.newest.state for c in trial.objects or []}
    healed = trial.but(
        observations=[
            o.but(state=json.dumps(newest[o.event_id])) if o.event_id in newest and o.state is not None else o
            for o in trial.observations
            if o.note != "after-delivery"
        ]
    )
    assert rejudge(healed).verdict == "pass"
    # A read after a delivery that goes back to an older state is what state-never-regresses sees.
    regressed = rejudge(
        healed.but(
            observations=[
                *healed.observations,
                *[o for o in trial.observations if o.note == "after-delivery"],
            ]
        )
    )
    assert {v.invariant for v in regressed.violations} == {"state-never-regresses"}


def test_an_objects_emails_are_judged_once_for_siblings_that_name_one_order(tmp_path):
    """The sinks count a receipt for every event it names: siblings share their order, so one receipt
    reads 1 for each of them and is one receipt, not two. Two are a violation on emails, and the
    database's own count is then the source 'rows'."""
    from acklab.evidence.documents.trial import Trial
    from acklab.harness.engine.execute import rejudge

    result = run(
        RunOptions(target="fixture:live", experiments=("sibling-events",), trials=1, seed=11, out=tmp_path)
    )
    (path,) = (result.bundle / "trials").glob("*.json")
    trial = Trial.read(json.loads(path.read_text()))
    assert trial.verdict == "pass"
    assert len(trial.objects or []) == 2

    def mailed(emails: int, *, rows: int | None = None) -> Trial:
        return trial.but(
            observations=[
                o.but(emails=emails if o.note != "before" else 0, calls=None).but(
                    effects=rows if rows is not None and o.note == "final" else o.effects
                )
                for o in trial.observations
            ]
        )

    assert rejudge(mailed(1)).verdict == "pass"
    twice = rejudge(mailed(2))
    assert {(v.invariant, v.source, v.observed) for v in twice.violations} == {
        ("at-most-once-per-object", "emails", 2)
    }
    assert len(twice.violations) == 2
    assert all("emails: " in v.detail for v in twice.violations)
    both = rejudge(mailed(2, rows=2))
    assert {v.source for v in both.violations} == {"emails", "rows"}
