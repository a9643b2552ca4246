"""Consumers that call the provider back, and verify what it signs, as scenarios (docs/provider-api.md, docs/signatures.md).

Each is a service the lab starts (``command:``) with the provider's API at ``{{provider_api_url}}``
(the stripe library's API base) and its own API key, which the lab first meets when the consumer
sends it: no byte the lab writes may contain it.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from tests.consumers.scenarios import ROOT, Scenario, write

API_KEY = "sk_test_provider_consumer_51b0e7d2a9c43f86"
OLD_STRIPE_SECRET = "whsec_test_acklab_retired_9876543210"
STRIPE_SIGNING = {"scheme": "stripe", "secret": "env:ACKLAB_TEST_STRIPE_SECRET"}
INTENT = {"id": "pi_{{order_id}}", "object": "payment_intent", "amount": "{{amount_cents}}", "currency": "eur",
          "status": "succeeded", "metadata": {"order_id": "{{order_id}}"}}  # fmt: skip
SESSION = {"id": "cs_test_{{order_id}}", "object": "checkout.session", "payment_intent": "pi_{{order_id}}",
           "payment_status": "paid", "amount_total": "{{amount_cents}}", "currency": "eur",
           "metadata": {"order_id": "{{order_id}}"}}  # fmt: skip
CHARGE = {"id": "ch_{{order_id}}", "object": "charge", "amount": 1200, "amount_refunded": 0, "currency": "eur",
          "payment_intent": "pi_{{order_id}}", "metadata": {"order_id": "{{order_id}}"}}  # fmt: skip


def stripe_event(event_type: str, obj: dict[str, Any]) -> dict[str, Any]:
    """A Stripe snapshot event as Stripe sends it (https://docs.stripe.com/api/events/object)."""
    return {
        "id": "{{event_id}}",
        "object": "event",
        "api_version": "2024-06-20",
        "created": "{{unix_time}}",
        "type": event_type,
        "data": {"object": obj},
        "livemode": False,
        "pending_webhooks": 1,
        "request": {"id": None, "idempotency_key": None},
    }


def uvicorn(app: str) -> list[str]:
    return [sys.executable, "-m", "uvicorn", "--host", "127.0.0.1", "--port", "{{port}}", "--log-level", "warning",
            app]  # fmt: skip


def _spec(name: str, argv: list[str], db: Path, *, count: str, env: dict[str, str], event: dict[str, Any],
          signing: dict[str, Any] | None = None, expect: dict[str, Any] | None = None,
          effects: dict[str, Any] | None = None) -> dict[str, Any]:  # fmt: skip
    return {
        "apiVersion": "acklab/v1",
        "kind": "target",
        "name": name,
        "endpoint": "http://127.0.0.1:{{port}}/webhooks",
        "signing": signing or STRIPE_SIGNING,
        "delivery": {"timeout_s": 5.0},
        "event": event,
        "command": {"argv": argv, "env": {"PYTHONPATH": str(ROOT), **env}, "cwd": str(ROOT), "ready_timeout_s": 30},
        "effects": {"sql": {"url": f"sqlite:///{db}", "count": count}, **(effects or {})},
        "expect": {"max_effects": 1, "conflict": "ignore", **(expect or {})},
    }  # fmt: skip


def _api_env(db: Path, mode: str) -> dict[str, str]:
    return {"STRIPE_API_BASE": "{{provider_api_url}}", "STRIPE_API_KEY": API_KEY, "SHOP_DB": str(db),
            "SHOP_MODE": mode}  # fmt: skip


API = {"provider_api": {"provider": "stripe"}}
FULFILLED = "SELECT count(*) FROM fulfillments WHERE order_id = :object_id"


def stripe_fetch(tmp: Path, mode: str, experiments: tuple[str, ...], expected: dict[str, str]) -> Scenario:
    """`tests.consumers.stripe_fetch` in `mode`: it re-fetches the payment intent of every payment_intent.succeeded
    (``refetch-only``: and the charge of a charge.succeeded, its only authentication)."""
    db = tmp / f"fetch-{mode}.sqlite"
    spec = _spec(f"stripe-fetch-{mode}", uvicorn("tests.consumers.stripe_fetch:app"), db, count=FULFILLED,
                 env=_api_env(db, mode), event=stripe_event("payment_intent.succeeded", INTENT), effects=API)  # fmt: skip
    return Scenario(f"stripe fetch ({mode})", write(tmp / f"fetch-{mode}.yaml", spec), experiments, expected)


def stripe_refunds(tmp: Path, mode: str, experiments: tuple[str, ...], expected: dict[str, str]) -> Scenario:
    """`tests.consumers.stripe_refunds` in `mode`: every completed checkout is refunded (sold out)."""
    db = tmp / f"refunds-{mode}.sqlite"
    spec = _spec(f"stripe-refunds-{mode}", uvicorn("tests.consumers.stripe_refunds:app"), db,
                 count="SELECT count(*) FROM refunds WHERE order_id = :object_id", env=_api_env(db, mode),
                 event=stripe_event("checkout.session.completed", SESSION), effects=API)  # fmt: skip
    return Scenario(
        f"stripe refunds ({mode})", write(tmp / f"refunds-{mode}.yaml", spec), experiments, expected
    )


REFUNDED = "SELECT coalesce(sum(amount), 0) FROM refunds WHERE charge_id = :object_id"


def refund_ledger(tmp: Path, mode: str, experiments: tuple[str, ...], expected: dict[str, str]) -> Scenario:
    """`tests.consumers.refund_ledger` in `mode`: a charge refunded in three parts, its cumulative total in each event."""
    db = tmp / f"ledger-{mode}.sqlite"
    argv = [sys.executable, "-m", "tests.consumers.refund_ledger", "--port", "{{port}}", "--db", str(db),
            "--mode", mode]  # fmt: skip
    spec = _spec(f"refund-ledger-{mode}", argv, db, count="SELECT count(*) FROM processed WHERE event_id = :event_id",
                 env={}, event=stripe_event("charge.refunded", {**CHARGE, "amount_refunded": 500}),
                 expect={"totals": {"field": "data.object.amount_refunded", "sum": REFUNDED}})  # fmt: skip
    spec["effects"]["sql"]["state"] = REFUNDED
    spec["lifecycle"] = {
        "object": "ch_{{order_id}}",
        "events": [
            {"type": "charge.refunded", "set": {"data.object.amount_refunded": total}, "state": str(total)}
            for total in (300, 700, 1200)
        ],
    }
    return Scenario(
        f"refund ledger ({mode})", write(tmp / f"ledger-{mode}.yaml", spec), experiments, expected
    )


def stripe_verifier(tmp: Path, mode: str, experiments: tuple[str, ...], expected: dict[str, str]) -> Scenario:
    """`tests.consumers.stripe_verifier` in `mode`, its secret rotated: it holds the new one."""
    db = tmp / f"verifier-{mode}.sqlite"
    argv = [sys.executable, "-m", "tests.consumers.stripe_verifier", "--port", "{{port}}", "--db", str(db),
            "--mode", mode]  # fmt: skip
    signing = {**STRIPE_SIGNING, "rotation": {"old_secret": OLD_STRIPE_SECRET}}
    spec = _spec(f"stripe-verifier-{mode}", argv, db, count="SELECT count(*) FROM orders WHERE event_id = :event_id",
                 env={}, event=stripe_event("payment_intent.succeeded", INTENT), signing=signing)  # fmt: skip
    return Scenario(
        f"stripe verifier ({mode})", write(tmp / f"verifier-{mode}.yaml", spec), experiments, expected
    )
