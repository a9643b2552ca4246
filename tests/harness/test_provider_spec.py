"""A target spec's effects.provider_api, {{provider_api_url}}, expect.totals and signing.rotation, as loaded."""

from __future__ import annotations

import asyncio
import base64

import pytest
import stripe

from acklab.harness.errors import SpecError
from acklab.harness.targets.spec import load_target
from tests.harness.conftest import SECRET, SECRET_ENV, target_doc, write_spec

OLD_SECRET = "whsec_" + base64.b64encode(b"acklab-retired-secret-01234567").decode()


def spec(tmp_path, monkeypatch, **changes):
    monkeypatch.setenv(SECRET_ENV, SECRET)
    doc = target_doc("shop", "http://127.0.0.1:9/hooks", f"sqlite:///{tmp_path}/shop.db")
    for key, value in changes.items():
        doc[key] = {**doc.get(key, {}), **value} if isinstance(value, dict) else value
    return write_spec(tmp_path / "shop.yaml", doc)


def test_the_providers_api_is_served_at_a_url_the_lab_picks_for_each_run(tmp_path, monkeypatch):
    path = spec(
        tmp_path,
        monkeypatch,
        endpoint="http://127.0.0.1:{{port}}/hooks",
        command={
            "argv": ["python", "-m", "shop", "--port", "{{port}}"],
            "env": {"API": "{{provider_api_url}}"},
        },
        effects={"provider_api": {"provider": "stripe"}},
    )
    target = load_target(path, allow_remote=False)
    can = target.capabilities()
    assert (can.provider_api, can.sinks) == ("stripe", ("provider_api",))
    target.provision()
    try:
        target.start_sinks()
        assert target.isolation is not None
        assert target.command is not None
        url = target.isolation.values["provider_api_url"]
        assert target.command.env["API"] == url
        assert target.sinks is not None
        assert target.sinks.provider_api_url == url
        # the stripe library reaches it: a 404 for an object no event made
        with pytest.raises(stripe.InvalidRequestError):
            stripe.StripeClient("sk_test_x", base_addresses={"api": url}).v1.charges.retrieve("ch_none")
    finally:
        asyncio.run(target.aclose())


def test_a_fixed_listen_needs_no_placeholder(tmp_path, monkeypatch):
    path = spec(tmp_path, monkeypatch, effects={"provider_api": {"listen": "127.0.0.1:12111"}})
    target = load_target(path, allow_remote=False)
    assert target.unbound is None
    assert target.capabilities().provider_api == "stripe"


def test_totals_are_read_from_the_consumers_database(tmp_path, monkeypatch):
    totals = {
        "field": "data.amount_cents",
        "sum": "SELECT sum(amount) FROM refunds WHERE order_id = :object_id",
    }
    target = load_target(spec(tmp_path, monkeypatch, expect={"totals": totals}), allow_remote=False)
    assert target.expect.totals is not None
    assert target.expect.totals.of({"data": {"amount_cents": 1200}}) == 1200
    assert target.expect.as_dict()["totals"] == totals
    http = {"http": {"url": "http://127.0.0.1:9/effects/{{event_id}}", "json_path": "count"}}
    doc = target_doc("shop", "http://127.0.0.1:9/hooks", "sqlite:///x.db")
    doc["effects"], doc["expect"] = http, {"totals": totals}
    with pytest.raises(SpecError, match=r"no effects\.sql"):
        load_target(write_spec(tmp_path / "http.yaml", doc), allow_remote=False)


def test_a_rotations_old_secret_is_checked_and_kept_secret(tmp_path, monkeypatch):
    monkeypatch.setenv("OLD_SECRET_FOR_TEST", OLD_SECRET)
    path = spec(tmp_path, monkeypatch, signing={"rotation": {"old_secret": "env:OLD_SECRET_FOR_TEST"}})
    target = load_target(path, allow_remote=False)
    assert target.old_secret == OLD_SECRET
    assert OLD_SECRET in target.credentials()
    monkeypatch.setenv("OLD_SECRET_FOR_TEST", "whsec_not base64!")
    with pytest.raises(SpecError, match="base64"):
        load_target(path, allow_remote=False)
