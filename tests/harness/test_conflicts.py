"""One conflict default, the same for a spec file and for acklab.attack(), derived from the event body;
and the record of what a conflicting body changed."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from acklab.evidence.redaction import remember
from acklab.harness.specs.app import DEFAULT_EVENT
from acklab.harness.targets.app_spec import app_target
from acklab.harness.targets.spec import load_target
from acklab.harness.wire.conflicts import LAST_RESORT, changed_fields, default_conflict
from acklab.harness.wire.templates import conflicting, render


async def asgi_ok(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """An ASGI app that is never called: these tests only describe targets."""
    raise AssertionError("not served here")


STRIPE_EVENT = {
    "id": "{{event_id}}",
    "object": "event",
    "type": "payment_intent.succeeded",
    "data": {"object": {"id": "{{order_id}}", "object": "payment_intent", "amount": 2000, "currency": "usd"}},
}
GITHUB_PUSH = {
    "ref": "refs/heads/main",
    "after": "{{event_id}}",
    "repository": {"id": 17273051, "full_name": "octo-org/octo-repo"},
    "head_commit": {"id": "{{order_id}}", "message": "Update README.md"},
}


@pytest.mark.parametrize(
    ("scheme", "event", "expected"),
    [
        ("stripe", STRIPE_EVENT, {"data.object.amount": 10700}),
        ("standard", DEFAULT_EVENT, {"data.amount_cents": 9900}),
        (
            "shopify",
            {"id": "{{order_id}}", "total_price": "199.00", "note": None},
            {"total_price": "8899.00"},
        ),
        (
            "standard",
            {"id": "{{event_id}}", "lines": [{"sku": "x", "unit_price": 5.5}]},
            {"lines.0.unit_price": 8705.5},
        ),
        # No amount: the first plain text field that holds no placeholder and does not name the event
        ("github", GITHUB_PUSH, {"ref": "refs/heads/main (conflicting)"}),
        ("gitlab", {"object_kind": "push", "checkout_sha": "{{event_id}}", "user_id": 4}, LAST_RESORT),
    ],
    ids=[
        "stripe-amount",
        "attack-default",
        "shopify-decimal-string",
        "amount-in-a-list",
        "text-field",
        "last-resort",
    ],
)
def test_the_default_is_derived_from_the_body(scheme, event, expected):
    changes = default_conflict(event, scheme)
    assert changes == expected
    original = render(event, event_id="evt_1", order_id="ord_1", seq=1, created=datetime.now(UTC))
    assert conflicting(original, changes).body != original.body


def _spec(tmp_path: Path, event: dict[str, object], scheme: str = "none") -> Path:
    doc = {
        "apiVersion": "acklab/v1",
        "kind": "target",
        "name": "shop",
        "endpoint": "http://127.0.0.1:9/hooks",
        "signing": {"scheme": scheme, **({"secret": "whsec_dGVzdA=="} if scheme != "none" else {})},
        "event": event,
        "effects": {
            "sql": {
                "url": f"sqlite:///{tmp_path}/x.db",
                "count": "SELECT count(*) FROM t WHERE e = :event_id",
            }
        },
    }
    path = tmp_path / "shop.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


@pytest.mark.parametrize("event", [DEFAULT_EVENT, STRIPE_EVENT, GITHUB_PUSH], ids=["order", "stripe", "push"])
def test_a_spec_and_attack_choose_the_same_conflict(tmp_path, event):
    spec = load_target(_spec(tmp_path, event), allow_remote=False)
    attacked = app_target(asgi_ok, fields={"event": event, "endpoint": "/hooks"}, effects=lambda _: 0)
    assert spec.conflict_set == attacked.conflict_set == default_conflict(event)
    assert "acklab_conflict" not in spec.conflict_set


def test_a_spec_conflict_still_wins(tmp_path):
    path = _spec(tmp_path, DEFAULT_EVENT)
    doc = yaml.safe_load(path.read_text())
    doc["conflict"] = {"set": {"data.currency": "USD"}}
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    assert load_target(path, allow_remote=False).conflict_set == {"data.currency": "USD"}


def test_changed_fields_name_each_difference_and_redact_secrets():
    remember("sk_live_remembered_secret_value")
    original = {
        "data": {"amount": 1200, "api_key": "k1", "note": "sk_live_remembered_secret_value"},
        "a": [1, 2],
    }
    changed = {"data": {"amount": 9900, "api_key": "k2", "note": "x"}, "a": [1], "extra": True}
    fields = {f["path"]: f for f in changed_fields(original, changed)}
    assert fields["data.amount"] == {"path": "data.amount", "original": 1200, "conflicting": 9900}
    assert fields["data.api_key"]["original"] == fields["data.api_key"]["conflicting"] == "[redacted]"
    assert fields["data.note"]["original"] == "[redacted]"  # a value the process knows is secret
    assert fields["a.1"] == {"path": "a.1", "original": 2, "conflicting": None, "missing": "conflicting"}
    assert fields["extra"]["missing"] == "original"
    assert "sk_live_remembered_secret_value" not in json.dumps(list(fields.values()))
    assert changed_fields(original, original) == []
