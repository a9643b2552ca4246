"""Each provider profile's deliveries, as a real consumer of that provider receives them.

A run (lost-ack: an original and a retry; conflicting-payload) is sent to a receiver shaped
like that provider's consumer, with a provider-shaped body. Every request the receiver got
is then checked with the provider's reference verifier (or its documented check), over the
very bytes the lab recorded (same sha256), and against the headers the provider sends.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import time
from pathlib import Path
from typing import Any

import pytest
import stripe

from acklab.harness.engine.runner import RunOptions, run
from acklab.harness.targets.server import ThreadedServer
from acklab.harness.wire.providers.github import HOOK_ID as GITHUB_HOOK_ID
from tests.harness.conftest import write_spec
from tests.harness.receivers import (
    EFFECTS_QUERY,
    Receiver,
    github_signature,
    require_headers,
    shopify_hmac,
    verify_github,
    verify_gitlab_token,
    verify_shopify,
    verify_standard,
    verify_stripe,
)

pytestmark = pytest.mark.slow
EXPERIMENTS = ("lost-ack", "conflicting-payload")


def spec_doc(
    name: str, scheme: str, url: str, db: str, event: dict[str, Any], **extra: Any
) -> dict[str, Any]:
    return {
        "apiVersion": "acklab/v1",
        "kind": "target",
        "name": name,
        "endpoint": f"{url}/hooks",
        "signing": {"scheme": scheme, "secret": f"env:{name.upper()}_SECRET"},
        "delivery": {"timeout_s": 3.0},
        "event": event,
        "effects": {"sql": {"url": f"sqlite:///{db}", "count": EFFECTS_QUERY}},
        **extra,
    }


def run_against(tmp_path: Path, receiver: Receiver, doc_of, monkeypatch, secret: str) -> tuple[dict, list]:
    """Serve `receiver`, run both experiments against the spec `doc_of(url)`; (run.json, trial records)."""
    name = doc_of("http://x")["name"]
    monkeypatch.setenv(f"{name.upper()}_SECRET", secret)
    with ThreadedServer(receiver.app()) as server:
        path = write_spec(tmp_path / f"{name}.yaml", doc_of(server.url))
        result = run(
            RunOptions(target=str(path), experiments=EXPERIMENTS, trials=1, seed=7, out=tmp_path / "out")
        )
    trials = [json.loads(p.read_text()) for p in sorted((result.bundle / "trials").glob("*.json"))]
    return result.run, trials


def assert_byte_for_byte(receiver: Receiver, trials: list[dict]) -> None:
    """Every body the receiver verified is one the lab recorded (and every answered one arrived)."""
    recorded = {d["body_sha256"] for t in trials for d in t["deliveries"]}
    received = {hashlib.sha256(c.body).hexdigest() for c in receiver.captured}
    answered = {d["body_sha256"] for t in trials for d in t["deliveries"] if d["status"] is not None}
    assert received <= recorded
    assert answered <= received
    assert len(receiver.captured) >= 3  # original, retry, conflicting body


def test_standard_webhooks_deliveries_verify_with_standardwebhooks_and_svix(tmp_path, monkeypatch):
    secret = "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()
    receiver = Receiver(
        f"sqlite:///{tmp_path}/std.db", [verify_standard(secret)], lambda h, d: h["webhook-id"]
    )
    event = {
        "id": "{{event_id}}",
        "type": "order.paid",
        "timestamp": "{{timestamp}}",
        "data": {"amount": 1200},
    }
    run_doc, trials = run_against(
        tmp_path,
        receiver,
        lambda url: spec_doc(
            "std", "standard", url, f"{tmp_path}/std.db", event, conflict={"set": {"data.amount": 9900}}
        ),
        monkeypatch,
        secret,
    )
    assert run_doc["verdict"] == "pass", run_doc
    assert_byte_for_byte(receiver, trials)
    for request in receiver.captured:  # the reference verifiers again, after the fact
        verify_standard(secret)(request.headers, request.body)
        assert request.headers["webhook-id"] == request.document["id"]
        assert abs(int(request.headers["webhook-timestamp"]) - time.time()) < 300


def test_stripe_deliveries_verify_with_stripe_python_and_carry_the_signed_t(tmp_path, monkeypatch):
    secret = "whsec_" + secrets.token_hex(24)
    receiver = Receiver(f"sqlite:///{tmp_path}/stripe.db", [verify_stripe(secret)], lambda h, d: d["id"])
    event = {
        "id": "{{event_id}}",
        "object": "event",
        "api_version": "2024-06-20",
        "created": "{{unix_time}}",
        "livemode": False,
        "type": "checkout.session.completed",
        "data": {"object": {"id": "cs_{{order_id}}", "object": "checkout.session", "amount_total": 1200}},
    }
    run_doc, trials = run_against(
        tmp_path,
        receiver,
        lambda url: spec_doc(
            "stripe",
            "stripe",
            url,
            f"{tmp_path}/stripe.db",
            event,
            conflict={"set": {"data.object.amount_total": 9900}},
        ),
        monkeypatch,
        secret,
    )
    assert run_doc["verdict"] == "pass", run_doc
    assert_byte_for_byte(receiver, trials)
    for request in receiver.captured:
        parsed = stripe.Webhook.construct_event(request.body, request.headers["stripe-signature"], secret)
        assert parsed["type"] == "checkout.session.completed"
        assert isinstance(request.document["created"], int)  # {{unix_time}} is a JSON integer
        assert abs(request.document["created"] - time.time()) < 300
        elements = dict(part.split("=", 1) for part in request.headers["stripe-signature"].split(","))
        assert abs(int(elements["t"]) - time.time()) < 300
        assert "stripe" in request.headers["user-agent"].lower()


@pytest.mark.parametrize("algorithm", ["sha256", "sha1"])
def test_github_deliveries_verify_with_githubs_documented_check_sha256_and_legacy_sha1(
    tmp_path, monkeypatch, algorithm
):
    secret = secrets.token_urlsafe(24)
    receiver = Receiver(
        f"sqlite:///{tmp_path}/gh.db",
        [verify_github(secret, algorithm=algorithm)],  # a sha1-only receiver checks X-Hub-Signature only
        lambda h, d: h["x-github-delivery"],
        detail_of=lambda d: d["commits"][0]["message"],
    )
    push = {
        "ref": "refs/heads/main",
        "before": "6113728f27ae82c7b1a177c8d03f9e96e0adf246",
        "after": "{{event_id}}",
        "repository": {"id": 1296269, "full_name": "octo-org/shop", "default_branch": "main"},
        "pusher": {"name": "octocat", "email": "octocat@github.com"},
        "commits": [{"id": "{{order_id}}", "message": "Ship the order page", "timestamp": "{{timestamp}}"}],
    }
    run_doc, trials = run_against(
        tmp_path,
        receiver,
        lambda url: spec_doc(
            "gh",
            "github",
            url,
            f"{tmp_path}/gh.db",
            push,
            delivery={"timeout_s": 3.0, "event_type": "push"},
            conflict={"set": {"commits.0.message": "rewritten history"}},
        ),
        monkeypatch,
        secret,
    )
    assert run_doc["verdict"] == "pass", run_doc
    assert_byte_for_byte(receiver, trials)
    conflicts = [c for c in receiver.captured if c.document["commits"][0]["message"] == "rewritten history"]
    assert conflicts  # conflict.set reached into commits[0]
    for request in receiver.captured:
        h = request.headers
        assert h["x-hub-signature-256"] == github_signature(secret, request.body, "sha256")
        assert h["x-hub-signature"] == github_signature(secret, request.body, "sha1")
        assert h["x-github-event"] == "push"  # delivery.event_type: a push body has no type
        assert h["x-github-hook-id"] == GITHUB_HOOK_ID
        assert GITHUB_HOOK_ID.isdigit()
        assert h["x-github-hook-installation-target-type"] == "repository"
        assert h["user-agent"].startswith("GitHub-Hookshot/")
    stored = [m for c in receiver.captured for m in receiver.details(c.headers["x-github-delivery"])]
    assert stored
    assert set(stored) == {"Ship the order page"}  # the conflicting body changed nothing


@pytest.mark.parametrize("token", ["legacy", "signing"])
def test_gitlab_push_deliveries_carry_gitlabs_headers_and_verify(tmp_path, monkeypatch, token):
    secret = (
        "glwht-" + secrets.token_hex(16)
        if token == "legacy"
        else "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()
    )
    check = verify_gitlab_token(secret) if token == "legacy" else verify_standard(secret)
    receiver = Receiver(f"sqlite:///{tmp_path}/gl.db", [check], lambda h, d: h["idempotency-key"])
    push = {
        "object_kind": "push",
        "event_name": "push",
        "before": "95790bf891e76fee5e1747ab589903a6a1f80f22",
        "after": "da1560886d4f094c3e6c9ef40349f7d38b5d27d7",
        "ref": "refs/heads/main",
        "checkout_sha": "{{event_id}}",
        "user_username": "jsmith",
        "project": {"id": 15, "path_with_namespace": "shop/orders"},
        "commits": [
            {"id": "{{order_id}}", "message": "Update Catalan translation", "timestamp": "{{timestamp}}"}
        ],
        "total_commits_count": 1,
    }
    run_doc, trials = run_against(
        tmp_path,
        receiver,
        lambda url: spec_doc(
            "gl",
            "gitlab",
            url,
            f"{tmp_path}/gl.db",
            push,
            conflict={"set": {"commits.0.message": "force-pushed"}},
        ),
        monkeypatch,
        secret,
    )
    assert run_doc["verdict"] == "pass", run_doc
    assert_byte_for_byte(receiver, trials)
    by_event: dict[str, list[dict[str, str]]] = {}
    for request in receiver.captured:
        h = request.headers
        check(h, request.body)
        assert h["x-gitlab-event"] == "Push Hook"  # from object_kind, as GitLab names it
        assert h["x-gitlab-event-uuid"] == h["idempotency-key"]
        assert h["x-gitlab-instance"].startswith("https://")
        assert h["user-agent"].startswith("GitLab/")
        by_event.setdefault(h["idempotency-key"], []).append(h)
    retried = [hs for hs in by_event.values() if len(hs) > 1]
    assert retried  # lost-ack retried: the Idempotency-Key stays, the webhook UUID is fresh per request
    for hs in retried:
        assert len({h["x-gitlab-webhook-uuid"] for h in hs}) == len(hs)


def test_shopify_deliveries_verify_with_shopifys_documented_check(tmp_path, monkeypatch):
    secret = "shpss_" + secrets.token_hex(16)
    receiver = Receiver(
        f"sqlite:///{tmp_path}/shop.db", [verify_shopify(secret)], lambda h, d: h["x-shopify-webhook-id"]
    )
    order = {
        "id": 820982911946154508,
        "admin_graphql_api_id": "gid://shopify/Order/{{order_id}}",
        "name": "#1001",
        "total_price": "12.00",
        "line_items": [{"id": 466157049, "title": "Mug", "quantity": 1}],
        "note_attributes": [{"name": "acklab_event", "value": "{{event_id}}"}],
    }
    run_doc, trials = run_against(
        tmp_path,
        receiver,
        lambda url: spec_doc(
            "shop",
            "shopify",
            url,
            f"{tmp_path}/shop.db",
            order,
            delivery={"timeout_s": 3.0, "event_type": "orders/create"},
            conflict={"set": {"line_items.0.quantity": 7}},
        ),
        monkeypatch,
        secret,
    )
    assert run_doc["verdict"] == "pass", run_doc
    assert_byte_for_byte(receiver, trials)
    for request in receiver.captured:
        h = request.headers
        assert h["x-shopify-hmac-sha256"] == shopify_hmac(secret, request.body)
        assert h["x-shopify-topic"] == "orders/create"
        assert h["x-shopify-webhook-id"] == h["x-shopify-event-id"]
        assert h["x-shopify-shop-domain"].endswith(".myshopify.com")
        assert h["x-shopify-triggered-at"].endswith("Z")


def test_an_alertmanager_consumer_with_api_keys_on_its_hook_and_its_effects_api(tmp_path, monkeypatch):
    hook_key, read_key = secrets.token_hex(16), secrets.token_hex(16)
    monkeypatch.setenv("ALERTS_HOOK_KEY", hook_key)
    monkeypatch.setenv("ALERTS_READ_KEY", read_key)
    receiver = Receiver(
        f"sqlite:///{tmp_path}/am.db",
        [require_headers({"X-Api-Key": hook_key})],
        lambda h, d: d["groupKey"],
        detail_of=lambda d: d["alerts"][0]["labels"].get("severity", ""),
        read_headers={"x-api-key": read_key},
    )
    notification = {
        "version": "4",
        "groupKey": "{{event_id}}",
        "status": "firing",
        "receiver": "shop-oncall",
        "groupLabels": {"alertname": "CheckoutLatencyHigh"},
        "externalURL": "http://alertmanager.example:9093",
        "alerts": [
            {
                "status": "firing",
                "labels": {"alertname": "CheckoutLatencyHigh", "instance": "{{order_id}}"},
                "annotations": {"summary": "p95 above 2 s"},
                "startsAt": "{{timestamp}}",
                "fingerprint": "{{event_id}}",
            }
        ],
    }

    def doc(url: str) -> dict[str, Any]:
        return {
            "apiVersion": "acklab/v1",
            "kind": "target",
            "name": "am",
            "endpoint": f"{url}/hooks",
            "headers": {"X-Api-Key": "env:ALERTS_HOOK_KEY"},
            "signing": {"scheme": "none"},
            "delivery": {"timeout_s": 3.0},
            "event": notification,
            "conflict": {"set": {"alerts.0.labels.severity": "critical"}},
            "effects": {
                "http": {
                    "url": f"{url}/alerts?resource={{{{event_id}}}}",
                    "json_path": "total",
                    "headers": {"X-Api-Key": "env:ALERTS_READ_KEY"},
                }
            },
        }

    run_doc, trials = run_against(tmp_path, receiver, doc, monkeypatch, "unused")
    assert run_doc["verdict"] == "pass", run_doc
    assert_byte_for_byte(receiver, trials)
    assert any(c.document["alerts"][0]["labels"].get("severity") == "critical" for c in receiver.captured)
    for request in receiver.captured:
        assert request.headers["x-api-key"] == hook_key
    written = b"".join(p.read_bytes() for p in (tmp_path / "out").rglob("*") if p.is_file())
    for key in (hook_key, read_key):
        assert key.encode() not in written
    headers = [d["headers"] for t in trials for d in t["deliveries"]]
    assert headers
    assert all(h["X-Api-Key"] == "[redacted]" for h in headers)
