"""Consumers beyond one event (docs/beyond-one-event.md) as scenarios, each served by the lab itself.

Each consumer is a separate process the lab starts from its target spec (``command:``) on a
``{{port}}`` it picks, its schema made by ``setup:``, its database a fresh SQLite file in
``{{scratch}}`` or a fresh PostgreSQL database (``database:`` + ``{{database_url}}``). The
events are Stripe-shaped (``evt_`` ids, ``created`` in seconds — ``{{event_time}}``, the
subscription, invoice or checkout session in ``data.object``). The tests run each a few
times; ``bench/beyond_one_event.py`` runs them the number of times the issue asks for.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from acklab.harness.core.plan import RunSettings
from tests.consumers.scenarios import ROOT, Scenario, write

STRIPE_SIGNING = {"scheme": "stripe", "secret": "env:ACKLAB_TEST_STRIPE_SECRET"}
PG_SERVER_ENV = "ACKLAB_TEST_PG_SERVER"  # a PostgreSQL server URL (a role with CREATEDB)
OUT_OF_ORDER_VARIANTS = ("reversed", "newest-first", "stale-redelivery", "same-second")


def stripe_event(kind: str, obj: dict[str, Any]) -> dict[str, Any]:
    """A Stripe event envelope around `obj` (``data.object``), as Stripe sends it."""
    return {
        "id": "{{event_id}}",
        "object": "event",
        "api_version": "2024-06-20",
        "created": "{{event_time}}",
        "type": kind,
        "livemode": False,
        "pending_webhooks": 1,
        "request": {"id": None, "idempotency_key": None},
        "data": {"object": obj},
    }


def _database(db: str, name: str) -> tuple[str, dict[str, Any]]:
    """(the consumer's database URL in the spec, the spec's extra sections) for ``sqlite`` or ``postgresql``."""
    if db == "sqlite":
        return f"sqlite:///{{{{scratch}}}}/{name}.db", {}
    if db == "postgresql":
        return "{{database_url}}", {"database": {"url": f"env:{PG_SERVER_ENV}"}}
    raise ValueError(f"db: got {db!r}; expected sqlite or postgresql")


def served_spec(
    name: str,
    *,
    module: str,
    env: dict[str, str],
    db: str,
    path: str,
    event: dict[str, Any],
    count: str,
    state: str | None = None,
    server: str = "uvicorn",
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A target spec whose service the lab starts on ``{{port}}``, its tables made by ``setup:``."""
    url, sections = _database(db, name)
    variable = next(k for k in env if k.endswith("_DB_URL"))
    env = {**env, variable: url, "PYTHONPATH": str(ROOT)}
    if server == "gunicorn":
        argv = [
            sys.executable,
            *("-m", "gunicorn", "--workers", "2", "--bind", "127.0.0.1:{{port}}", "--log-level", "warning"),
            f"tests.consumers.{module}:create_app()",
        ]
    else:
        argv = [
            sys.executable,
            *(
                "-m",
                "uvicorn",
                "--factory",
                "--host",
                "127.0.0.1",
                "--port",
                "{{port}}",
                "--log-level",
                "warning",
            ),
            f"tests.consumers.{module}:create_app",
        ]
    sql: dict[str, Any] = {"url": url, "count": count}
    if state is not None:
        sql["state"] = state
    return {
        "apiVersion": "acklab/v1",
        "kind": "target",
        "name": name,
        "endpoint": f"http://127.0.0.1:{{{{port}}}}{path}",
        "signing": STRIPE_SIGNING,
        "delivery": {"timeout_s": 5.0},
        "event": event,
        "setup": {"argv": [sys.executable, "-m", f"tests.consumers.{module}", "migrate"]},
        "command": {
            "argv": argv,
            "env": env,
            "cwd": str(ROOT),
            "ready": {"url": "http://127.0.0.1:{{port}}/health", "status": [200]},
            "ready_timeout_s": 30,
        },
        "effects": {"sql": sql},
        "expect": {"max_effects": 1},
        **sections,
        **(extra or {}),
    }


# Receipts name the order: a message counts for every event of it (siblings, the webhook of a checkout).
MAIL_SINK = {"listen": "127.0.0.1:{{smtp_port}}", "match": "{{order_id}}"}


# -- out-of-order: a subscription store ---------------------------------------------------------

SUBSCRIPTION_EXPECTED = {
    # The variants each store fails, by newest-state-wins (the rest of its verdict per variant).
    "arrival": {"reversed", "newest-first", "stale-redelivery", "same-second"},
    "watermark-ge": {"same-second"},
    "correct": set(),
}


def subscriptions(tmp: Path, mode: str, db: str = "sqlite", *, trials: int = 1) -> Scenario:
    """A Stripe subscription store under gunicorn: ``arrival``, ``watermark-ge`` or ``correct``."""
    from tests.consumers.subscriptions import COUNT_QUERY, STATE_QUERY

    subscription = {
        "id": "sub_{{order_id}}",
        "object": "subscription",
        "customer": "cus_{{order_id}}",
        "status": "active",
        "current_period_end": "{{event_time}}",
        "items": {"object": "list", "data": [{"price": {"id": "price_basic", "unit_amount": 1200}}]},
    }
    statuses = (("created", "incomplete"), ("updated", "active"), ("deleted", "canceled"))
    lifecycle = {
        "object": "sub_{{order_id}}",
        "events": [
            {"type": f"customer.subscription.{step}", "set": {"data.object.status": state}, "state": state}
            for step, state in statuses
        ],
    }
    spec = served_spec(
        f"subscriptions-{mode}-{db}",
        module="subscriptions",
        env={"SUBS_DB_URL": "", "SUBS_MODE": mode},
        db=db,
        path="/stripe/webhooks",
        event=stripe_event("customer.subscription.updated", subscription),
        count=COUNT_QUERY,
        state=STATE_QUERY,
        server="gunicorn",
        extra={"lifecycle": lifecycle},
    )
    verdict = "fail" if SUBSCRIPTION_EXPECTED[mode] else "pass"
    return Scenario(
        f"subscription store ({mode}, {db})",
        write(tmp / f"subscriptions-{mode}-{db}.yaml", spec),
        ("out-of-order",),
        {"out-of-order": verdict},
        trials=trials,
    )


# -- sibling-events: an invoice consumer ----------------------------------------------------------


def invoices(tmp: Path, mode: str, db: str = "sqlite", *, trials: int = 1, mail: str = "") -> Scenario:
    """A Stripe invoice consumer: provisions on ``both`` siblings, or once per invoice (``correct``);
    `mail` ``provisioned`` or ``each``: it mails receipts to the lab's SMTP sink (``each`` fails on
    emails)."""
    from tests.consumers.invoices import COUNT_QUERY

    invoice = {
        "id": "in_{{order_id}}",
        "object": "invoice",
        "customer": "cus_{{order_id}}",
        "subscription": "sub_{{order_id}}",
        "status": "paid",
        "amount_paid": 1200,
        "currency": "eur",
    }
    name = f"invoices-{mode}-{db}" + (f"-mail-{mail}" if mail else "")
    mailing = {"INVOICES_MAIL": mail, "SMTP_PORT": "{{smtp_port}}"} if mail else {}
    spec = served_spec(
        name,
        module="invoices",
        env={"INVOICES_DB_URL": "", "INVOICES_MODE": mode, **mailing},
        db=db,
        path="/stripe/webhooks",
        event=stripe_event("invoice.paid", invoice),
        count=COUNT_QUERY,
        # No lifecycle to play, only the object its events share (the count reads it).
        extra={
            "siblings": [{"type": "invoice.payment_succeeded"}],
            "lifecycle": {"object": "in_{{order_id}}"},
        },
    )
    if mail:
        spec["effects"]["smtp"] = MAIL_SINK
    return Scenario(
        f"invoice consumer ({mode}, {db}" + (f", receipts {mail})" if mail else ")"),
        write(tmp / f"{name}.yaml", spec),
        ("sibling-events",),
        {"sibling-events": "fail" if mode == "both" or mail == "each" else "pass"},
        trials=trials,
    )


# -- race-with-request: a checkout ----------------------------------------------------------------


def checkout(
    tmp: Path,
    mode: str,
    db: str = "sqlite",
    *,
    trials: int = 1,
    work_ms: float = 2.0,
    burst_sync: str = "last-byte",
    mail: str = "",
) -> Scenario:
    """A checkout whose webhook and browser return both fulfil: ``racy`` (check-then-insert) or ``locked``;
    `mail` ``created`` or ``always``: it mails the confirmation to the lab's SMTP sink (expected to
    fail on emails only when ``always``)."""
    from tests.consumers.checkout import COUNT_QUERY

    session = {
        "id": "cs_{{order_id}}",
        "object": "checkout.session",
        "payment_status": "paid",
        "status": "complete",
        "amount_total": 1200,
        "currency": "eur",
        "client_reference_id": "{{order_id}}",
    }
    name = f"checkout-{mode}-{db}" + (f"-mail-{mail}" if mail else "")
    mailing = {"CHECKOUT_MAIL": mail, "SMTP_PORT": "{{smtp_port}}"} if mail else {}
    spec = served_spec(
        name,
        module="checkout",
        env={"CHECKOUT_DB_URL": "", "CHECKOUT_MODE": mode, "CHECKOUT_WORK_MS": f"{work_ms:g}", **mailing},
        db=db,
        path="/stripe/webhooks",
        event=stripe_event("checkout.session.completed", session),
        count=COUNT_QUERY,
        extra={
            "lifecycle": {"object": "cs_{{order_id}}"},
            "competitor": {
                "method": "GET",
                "url": "http://127.0.0.1:{{port}}/checkout/success?session_id=cs_{{order_id}}",
                "ok_status": [200],
            },
        },
    )
    if mail:
        spec["effects"]["smtp"] = MAIL_SINK
    return Scenario(
        f"checkout ({mode}, {db}, {work_ms:g} ms window" + (f", mails {mail})" if mail else ")"),
        write(tmp / f"{name}.yaml", spec),
        ("race-with-request",),
        {"race-with-request": "fail" if mode == "racy" or mail == "always" else "pass"},
        trials=trials,
        settings=RunSettings(burst_sync=burst_sync),
    )
