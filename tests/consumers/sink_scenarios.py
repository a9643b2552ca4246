"""Consumers whose duplicates are outside their database, as scenarios (docs/sinks.md).

Each consumer is a service the lab starts (``command:``), with the sinks' ports in its
environment: ``SMTP_PORT: "{{smtp_port}}"``, ``REFUNDS_URL: http://127.0.0.1:{{outbound_port}}``.
The credentials it sends the sinks (an SMTP login, a payment provider's API key) are its own:
the lab never learns them in advance, and no byte it writes may contain them.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from tests.consumers.scenarios import ROOT, SECRETS, STANDARD_EVENT, Scenario, write

__all__ = ["SECRETS"]

SMTP_USER = "shop-relay-user"
SMTP_PASSWORD = "smtp-relay-password-4f1c9a7e"
API_KEY = "sk_test_refunds_9b2e71c4d0a8f653"
SIGNING = {"scheme": "standard", "secret": "env:ACKLAB_TEST_WEBHOOK_SECRET"}
CONSUMER_CREDENTIALS = (SMTP_PASSWORD, API_KEY)


def _spec(name: str, argv: list[str], db: Path, *, effects: dict[str, Any], expect: dict[str, Any],
          env: dict[str, str]) -> dict[str, Any]:  # fmt: skip
    return {
        "apiVersion": "acklab/v1",
        "kind": "target",
        "name": name,
        "endpoint": "http://127.0.0.1:{{port}}/webhooks",
        "signing": SIGNING,
        "delivery": {"timeout_s": 2.0},
        "event": STANDARD_EVENT,
        "command": {"argv": argv, "env": {"PYTHONPATH": str(ROOT), **env}, "cwd": str(ROOT), "ready_timeout_s": 30},
        "effects": {"sql": {"url": f"sqlite:///{db}", "count": "SELECT count(*) FROM orders WHERE event_id = :event_id"},
                    **effects},
        "expect": {"max_effects": 1, "max_emails": 1, "max_calls": 1, **expect},
    }  # fmt: skip


SMTP_SINK = {"smtp": {"listen": "127.0.0.1:{{smtp_port}}", "match": "{{order_id}}"}}
SMTP_ENV = {"SMTP_PORT": "{{smtp_port}}", "SMTP_USER": SMTP_USER, "SMTP_PASSWORD": SMTP_PASSWORD}


def receipt_mailer(
    tmp: Path, mode: str, experiments: tuple[str, ...], expected: dict[str, str], *, encoding: str = "plain"
) -> Scenario:
    """`tests.consumers.receipt_mailer` (smtplib) in `mode`, its receipts sent as `encoding`."""
    name = mode if encoding == "plain" else f"{mode}-{encoding}"
    db = tmp / f"receipts-{name}.sqlite"
    argv = [sys.executable, "-m", "tests.consumers.receipt_mailer", "--port", "{{port}}", "--db", str(db),
            "--mode", mode, "--encoding", encoding]  # fmt: skip
    # It dedupes by the event id and keeps the first body: a conflicting one is acknowledged, unchanged.
    expect: dict[str, Any] = {"conflict": "ignore"} | ({"effects_within_s": 1.0} if mode == "worker" else {})
    spec = _spec(f"receipts-{name}", argv, db, effects=SMTP_SINK, expect=expect, env=SMTP_ENV)
    return Scenario(
        f"receipt mailer ({mode}, {encoding})",
        write(tmp / f"receipts-{name}.yaml", spec),
        experiments,
        expected,
    )


def django_receipts(tmp: Path, mode: str, experiments: tuple[str, ...], expected: dict[str, str]) -> Scenario:
    """`tests.consumers.django_receipts` (Django's SMTP backend) under gunicorn, in `mode`."""
    db = tmp / f"django-{mode}.sqlite"
    argv = [sys.executable, "-m", "gunicorn", "--workers", "1", "--threads", "8", "--bind", "127.0.0.1:{{port}}",
            "tests.consumers.django_receipts:application"]  # fmt: skip
    env = {**SMTP_ENV, "RECEIPTS_DB": str(db), "RECEIPTS_MODE": mode}
    spec = _spec(f"django-receipts-{mode}", argv, db, effects=SMTP_SINK, expect={}, env=env)
    spec["setup"] = {"argv": [sys.executable, "-m", "tests.consumers.django_receipts", "migrate"],
                     "env": {"PYTHONPATH": str(ROOT), **env}}  # fmt: skip
    return Scenario(
        f"django receipts ({mode})", write(tmp / f"django-{mode}.yaml", spec), experiments, expected
    )


def refunds(
    tmp: Path, mode: str, experiments: tuple[str, ...], expected: dict[str, str], *, body: str = "plain"
) -> Scenario:
    """`tests.consumers.refunds` (FastAPI, httpx) in `mode`, its JSON `body` ``plain`` or ``escaped``;
    the payment API drops each event's first call."""
    name = mode if body == "plain" else f"{mode}-{body}"
    db = tmp / f"refunds-{name}.sqlite"
    argv = [sys.executable, "-m", "uvicorn", "--host", "127.0.0.1", "--port", "{{port}}", "--log-level", "warning",
            "tests.consumers.refunds:app"]  # fmt: skip
    outbound = {
        "outbound": {
            "listen": "127.0.0.1:{{outbound_port}}",
            "idempotency_header": "Idempotency-Key",
            "routes": [{"method": "POST", "path": "/v1/refunds", "match": "{{order_id}}",
                        "respond": {"status": 200, "json": {"id": "re_{{seq}}", "status": "succeeded"}},
                        "first": {"drop": True}}],
        }
    }  # fmt: skip
    env = {"REFUNDS_URL": "http://127.0.0.1:{{outbound_port}}", "REFUNDS_API_KEY": API_KEY,
           "REFUNDS_DB": str(db), "REFUNDS_MODE": mode, "REFUNDS_JSON": body}  # fmt: skip
    spec = _spec(f"refunds-{name}", argv, db, effects=outbound, expect={}, env=env)
    scenario_name = f"refunds ({mode}, {body} JSON)"
    return Scenario(scenario_name, write(tmp / f"refunds-{name}.yaml", spec), experiments, expected)
