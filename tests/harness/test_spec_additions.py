"""The target spec's additions: list paths in conflict.set, {{unix_time}}, env: everywhere,
headers:, delivery.event_type — and `acklab validate` checking what `run` would refuse."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from acklab.harness.errors import SpecError
from acklab.harness.targets.spec import load_target
from acklab.harness.wire.providers import event_type_header
from acklab.harness.wire.templates import conflicting, render, resolve_path
from tests.harness.conftest import SECRET, SECRET_ENV, target_doc, write_spec
from tests.harness.test_cli import acklab

PUSH = {
    "object_kind": "push",
    "checkout_sha": "{{event_id}}",
    "commits": [{"id": "{{order_id}}", "message": "Update README"}],
}
ALERT = {"groupKey": "{{event_id}}", "alerts": [{"labels": {"instance": "{{event_id}}"}}]}


def rendered(template):
    return render(
        template,
        event_id="evt_1",
        order_id="ord_1",
        seq=3,
        created=datetime(2024, 5, 6, 7, 8, 9, 250000, tzinfo=UTC),
    )


def spec(tmp_path, monkeypatch, name="shop", **changes):
    monkeypatch.setenv(SECRET_ENV, SECRET)
    doc = target_doc(name, "http://127.0.0.1:9/hooks", f"sqlite:///{tmp_path}/{name}.db")
    doc.update(changes)
    return write_spec(tmp_path / f"{name}.yaml", doc)


def test_conflict_set_indexes_lists_with_numeric_segments():
    push = conflicting(rendered(PUSH), {"commits.0.message": "rewritten"})
    assert push.document["commits"] == [{"id": "ord_1", "message": "rewritten"}]
    alert = conflicting(rendered(ALERT), {"alerts.0.labels.severity": "critical"})
    assert alert.document["alerts"][0]["labels"] == {"instance": "evt_1", "severity": "critical"}
    assert alert.event_id == "evt_1"
    assert alert.body != rendered(ALERT).body


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("commits.1.message", "stops at '1': commits is a list of 1: index 1 does not exist"),
        ("commits.first.message", "stops at 'first': commits is a list of 1: 'first' is not an index"),
        ("commit.0.message", "stops at 'commit': the event has no 'commit'"),
        ("commits.0.message.text", "stops at 'text': commits.0.message is a str ('Update README')"),
        ("commits.0.author.name", "stops at 'author': commits.0 has no 'author'"),
    ],
)
def test_a_path_that_does_not_exist_names_where_it_stops(path, message):
    with pytest.raises(SpecError, match=r"conflict\.set") as info:
        resolve_path(rendered(PUSH).document, path)
    assert message in str(info.value)
    assert repr(path) in str(info.value)


def test_unix_time_placeholders_are_integers_when_they_are_the_whole_value():
    event = rendered(
        {
            "id": "{{event_id}}",
            "created": "{{unix_time}}",
            "ms": "{{unix_time_ms}}",
            "note": "at {{unix_time}}",
            "iso": "{{timestamp}}",
            "seq": "{{seq}}",
        }
    )
    doc = json.loads(event.body)
    stamp = int(datetime(2024, 5, 6, 7, 8, 9, tzinfo=UTC).timestamp())
    assert doc["created"] == stamp
    assert doc["ms"] == stamp * 1000 + 250
    assert doc["note"] == f"at {stamp}"
    assert doc["iso"] == "2024-05-06T07:08:09Z"
    assert doc["seq"] == 3


def test_a_wrong_list_path_is_exit_3_from_validate_and_from_run_before_anything_is_sent(
    tmp_path, monkeypatch, capsys
):
    path = spec(
        tmp_path,
        monkeypatch,
        event={"id": "{{event_id}}", **PUSH},
        conflict={"set": {"commits.2.message": "x"}},
    )
    assert acklab("validate", str(path)) == 3
    out = capsys.readouterr().out
    assert "'commits.2.message' stops at '2': commits is a list of 1" in out
    assert "not valid" in out
    assert acklab("run", "--target", str(path), "--out", str(tmp_path / "out")) == 3
    assert "'commits.2.message' stops at '2'" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_validate_prints_its_verdict_on_stdout(tmp_path, monkeypatch, capsys):
    path = spec(
        tmp_path,
        monkeypatch,
        event={"id": "{{event_id}}", **PUSH},
        conflict={"set": {"commits.0.message": "x"}},
    )
    assert acklab("validate", str(path)) == 0
    captured = capsys.readouterr()
    assert f"{path}: a valid target spec (shop)" in captured.out
    assert captured.err == ""


def test_validate_lists_every_unset_env_name_and_exits_3_unless_allowed(tmp_path, monkeypatch, capsys):
    for name in ("SHOP_HOOK_URL", "SHOP_HOOK_KEY", "SHOP_READ_KEY"):
        monkeypatch.delenv(name, raising=False)
    path = spec(
        tmp_path,
        monkeypatch,
        endpoint="env:SHOP_HOOK_URL",
        headers={"X-Api-Key": "env:SHOP_HOOK_KEY"},
        effects={
            "http": {
                "url": "http://127.0.0.1:9/e/{{event_id}}",
                "json_path": "n",
                "headers": {"X-Read-Key": "env:SHOP_READ_KEY"},
            }
        },
    )
    assert acklab("validate", str(path)) == 3
    out = capsys.readouterr().out
    for where, name in (
        ("endpoint", "SHOP_HOOK_URL"),
        ("headers.X-Api-Key", "SHOP_HOOK_KEY"),
        ("effects.http.headers.X-Read-Key", "SHOP_READ_KEY"),
    ):
        assert f"{name} ({where})" in out
    assert "--allow-unset" in out
    assert acklab("validate", "--allow-unset", str(path)) == 0
    out = capsys.readouterr().out
    assert "unset environment variables (not checked): SHOP_HOOK_URL (endpoint)" in out
    assert "a valid target spec" in out


@pytest.mark.parametrize(
    "effects",
    [
        {"http": {"url": "http://198.51.100.4:8080/effects/{{event_id}}", "json_path": "count"}},
        {
            "sql": {
                "url": "postgresql://shop@db.example.com:5432/shop",
                "count": "SELECT count(*) FROM f WHERE event_id = :event_id",
            }
        },
    ],
    ids=["effects.http.url", "effects.sql.url"],
)
def test_validate_and_run_hold_every_effects_url_to_the_loopback_rule(tmp_path, monkeypatch, capsys, effects):
    path = spec(tmp_path, monkeypatch, effects=effects)
    assert acklab("validate", str(path)) == 5
    assert "--allow-remote" in capsys.readouterr().out
    assert acklab("run", "--target", str(path), "--out", str(tmp_path / "out")) == 5
    assert not (tmp_path / "out").exists()
    assert acklab("validate", "--allow-remote", str(path)) == 0


def test_an_env_endpoint_is_named_by_its_variable_never_by_its_value(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SHOP_HOOK_URL", "http://203.0.113.9:9000/hooks?token=tok-planted-0123456789")
    path = spec(tmp_path, monkeypatch, endpoint="env:SHOP_HOOK_URL")
    assert acklab("validate", str(path)) == 5
    captured = capsys.readouterr()
    assert "env:SHOP_HOOK_URL" in captured.out
    assert "tok-planted-0123456789" not in captured.out + captured.err
    monkeypatch.setenv("SHOP_HOOK_URL", "http://127.0.0.1:9000/hooks?token=tok-planted-0123456789")
    target = load_target(path, allow_remote=False)
    assert target.endpoint.endswith("token=tok-planted-0123456789")
    assert target.describe().endpoint == "env:SHOP_HOOK_URL"


@pytest.mark.parametrize(
    ("scheme", "header", "fix"),
    [
        ("github", "X-Hub-Signature-256", "remove it"),
        ("github", "X-GitHub-Event", "set delivery.event_type instead"),
        ("standard", "webhook-id", "remove it"),
        ("none", "Content-Length", "the HTTP client sets Content-Length itself"),
    ],
)
def test_headers_may_not_replace_what_the_signer_or_the_client_sets(
    tmp_path, monkeypatch, capsys, scheme, header, fix
):
    signing = {"scheme": scheme} if scheme == "none" else {"scheme": scheme, "secret": f"env:{SECRET_ENV}"}
    path = spec(tmp_path, monkeypatch, signing=signing, headers={header: "x"})
    assert acklab("validate", str(path)) == 3
    assert fix in capsys.readouterr().out


def test_headers_and_event_type_reach_the_target_and_user_agent_may_be_overridden(tmp_path, monkeypatch):
    monkeypatch.setenv("SHOP_HOOK_KEY", "hook-key-0123456789")
    path = spec(
        tmp_path,
        monkeypatch,
        signing={"scheme": "github", "secret": f"env:{SECRET_ENV}"},
        headers={"X-Api-Key": "env:SHOP_HOOK_KEY", "User-Agent": "shop-tests/1.0"},
        delivery={"timeout_s": 2.0, "event_type": "push"},
    )
    target = load_target(path, allow_remote=False)
    assert target.headers == {"X-Api-Key": "hook-key-0123456789", "User-Agent": "shop-tests/1.0"}
    assert target.event_type_of({"type": "order.paid"}) == "push"
    assert "hook-key-0123456789" in target.credentials()


@pytest.mark.parametrize(
    ("scheme", "explicit", "body", "header"),
    [
        ("gitlab", None, {"object_kind": "push"}, "Push Hook"),
        ("gitlab", None, {"object_kind": "merge_request"}, "Merge Request Hook"),
        ("gitlab", None, {"object_kind": "build"}, "Job Hook"),
        ("gitlab", "Tag Push Hook", {"object_kind": "push"}, "Tag Push Hook"),
        ("github", None, {"ref": "refs/heads/main"}, "webhook"),
        ("github", None, {"type": "ping"}, "ping"),
        ("shopify", None, {"type": "orders.create"}, "orders/create"),
        ("shopify", "orders/paid", {"type": "orders.create"}, "orders/paid"),
    ],
)
def test_the_event_type_header_comes_from_the_spec_else_from_the_body(scheme, explicit, body, header):
    assert event_type_header(scheme, explicit, body) == header


def test_validate_notes_where_the_event_type_header_comes_from(tmp_path, monkeypatch, capsys):
    path = spec(
        tmp_path,
        monkeypatch,
        signing={"scheme": "github", "secret": f"env:{SECRET_ENV}"},
        event={"id": "{{event_id}}", "ref": "refs/heads/main"},
        conflict={"set": {"ref": "refs/heads/other"}},
    )
    assert acklab("validate", str(path)) == 0
    assert (
        "X-GitHub-Event will be 'webhook' (from the body); set delivery.event_type" in capsys.readouterr().out
    )
