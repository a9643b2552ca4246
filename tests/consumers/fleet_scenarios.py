"""The consumers beyond one process (`fleet_orders`, `github_deliveries`, `slack_events`) as scenarios:
their target specs — ``services:``, ``topology:``, ``command:`` with ``{{port}}`` — and the verdicts
each must get. The lab starts every one of them itself (replicas, restarts, a shifted clock)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from acklab.harness.core.plan import RunSettings
from tests.consumers.scenarios import DEFAULT_SET, ROOT, STRIPE_EVENT, Scenario, module, target_spec, write

FLEET = ("replica-duplicates", "restart-redelivery", "late-redelivery", "provider-retries")
SQLITE = "sqlite:///{{scratch}}/orders.sqlite"
DAY = 86_400


def orders_env(dedupe: str, db_url: str = SQLITE, ttl_s: int = 300) -> dict[str, str]:
    """`tests.consumers.fleet_orders`' own variables, run placeholders unfilled (``{{scratch}}``...)."""
    env = {
        "ACKLAB_TEST_DB_URL": db_url if db_url == SQLITE else "{{database_url}}",
        "ACKLAB_TEST_DEDUPE": dedupe,
        "ACKLAB_TEST_TTL_S": str(ttl_s),
        "PYTHONPATH": str(ROOT),
    }
    if dedupe == "redis":
        env["REDIS_URL"] = "{{redis_url}}"
    return env


def orders_argv(workers: int = 1) -> list[str]:
    """`tests.consumers.fleet_orders` under gunicorn on ``{{port}}``: one process of the consumer."""
    return [
        sys.executable,
        *("-m", "gunicorn", "--workers", str(workers), "--bind", "127.0.0.1:{{port}}"),
        *("--graceful-timeout", "1", "--log-level", "warning"),
        "tests.consumers.fleet_orders:create_app()",
    ]


def fleet_orders(
    tmp: Path,
    dedupe: str,
    experiments: tuple[str, ...],
    expected: dict[str, str],
    *,
    replicas: int = 1,
    workers: int = 1,
    db_url: str = SQLITE,
    ttl_s: int = 300,
    label: str = "",
) -> Scenario:
    """A Stripe consumer under gunicorn (`tests.consumers.fleet_orders`), deduping by ``lru``,
    ``redis`` (SET NX EX `ttl_s`) or ``unique`` (a primary key), with `replicas` processes."""
    env = orders_env(dedupe, db_url, ttl_s)
    spec = target_spec(
        f"fleet-orders-{dedupe}",
        "http://127.0.0.1:{{port}}/stripe",
        signing={"scheme": "stripe", "secret": "env:ACKLAB_TEST_STRIPE_SECRET"},
        event=STRIPE_EVENT,
        conflict={"set": {"data.object.amount_cents": 9900}},
        effects={
            "sql": {
                "url": env["ACKLAB_TEST_DB_URL"],
                "count": "SELECT count(*) FROM fulfilments WHERE event_id = :event_id",
            }
        },
        expect={"max_effects": 1, "conflict": "ignore"},
        command={
            "argv": orders_argv(workers),
            "env": env,
            "cwd": str(ROOT),
            "ready_timeout_s": 30,
        },
    )
    spec["setup"] = {
        "argv": [sys.executable, "-c", "from tests.consumers.fleet_orders import migrate; migrate()"],
        "env": env,
    }
    if db_url != SQLITE:
        spec["database"] = {"url": db_url}
    if dedupe == "redis":
        spec["services"] = ["redis"]
    if replicas != 1:
        spec["topology"] = {"replicas": replicas}
    name = f"{dedupe}-{replicas}x{workers}{label}"
    return Scenario(f"fleet orders ({name})", write(tmp / f"orders-{name}.yaml", spec), experiments, expected)


def lru_single(tmp: Path) -> Scenario:
    """An in-memory LRU in one process: every single-process experiment passes, a deploy loses it."""
    chosen = (*DEFAULT_SET, "restart-redelivery")
    return fleet_orders(
        tmp, "lru", chosen, dict.fromkeys(DEFAULT_SET, "pass") | {"restart-redelivery": "fail"}
    )


def github_redelivery(tmp: Path) -> Scenario:
    """GitHub, deduping by X-GitHub-Delivery in memory for an hour; started by the lab."""
    spec = target_spec(
        "github-deliveries",
        "http://127.0.0.1:{{port}}/github",
        signing={"scheme": "github", "secret": "env:ACKLAB_TEST_GITHUB_SECRET"},
        event={
            "ref": "refs/heads/main",
            "before": "0000000000000000000000000000000000000000",
            "after": "{{event_id}}",
            "repository": {"full_name": "acme/shop"},
            "head_commit": {"id": "{{order_id}}", "message": "Fix the checkout"},
        },
        effects={
            "sql": {
                "url": "sqlite:///{{scratch}}/checks.sqlite",
                "count": "SELECT count(*) FROM check_runs WHERE delivery = :event_id",
            }
        },
        command={
            "argv": module("github_deliveries", "--port", "{{port}}", "--db", "{{scratch}}/checks.sqlite"),
            "env": {"PYTHONPATH": str(ROOT)},
            "cwd": str(ROOT),
            "ready_timeout_s": 30,
        },
    )
    spec["delivery"]["event_type"] = "push"
    chosen = ("lost-ack", "late-redelivery")
    return Scenario(
        "GitHub receiver deduping by delivery in memory",
        write(tmp / "github.yaml", spec),
        chosen,
        {"lost-ack": "pass", "late-redelivery": "fail"},
    )


def slack_events(tmp: Path, mode: str) -> Scenario:
    """A Slack Events API app; ``ignores-retries`` posts again on every retry, ``dedupe`` does not."""
    spec = target_spec(
        f"slack-{mode}",
        "http://127.0.0.1:{{port}}/slack/events",
        signing={"scheme": "slack", "secret": "env:ACKLAB_TEST_SLACK_SECRET"},
        event={
            "token": "verification-token-unused",
            "team_id": "T0ACKLAB",
            "api_app_id": "A0ACKLAB",
            "type": "event_callback",
            "event_id": "{{event_id}}",
            "event_time": "{{unix_time}}",
            "event": {
                "type": "app_mention",
                "channel": "{{order_id}}",
                "user": "U0ACKLAB",
                "text": "<@U0BOT> deploy",
            },
        },
        effects={
            "sql": {
                "url": "sqlite:///{{scratch}}/replies.sqlite",
                "count": "SELECT count(*) FROM replies WHERE event_id = :event_id",
            }
        },
        command={
            "argv": module(
                "slack_events", "--port", "{{port}}", "--db", "{{scratch}}/replies.sqlite", "--mode", mode
            ),
            "env": {"PYTHONPATH": str(ROOT)},
            "cwd": str(ROOT),
            "ready_timeout_s": 30,
        },
    )
    verdict = "fail" if mode == "ignores-retries" else "pass"
    return Scenario(
        f"Slack events ({mode})",
        write(tmp / f"slack-{mode}.yaml", spec),
        ("provider-retries",),
        {"provider-retries": verdict},
    )


def settings(**changes: Any) -> RunSettings:
    return RunSettings(**changes)


def confined_orders(tmp: Path) -> tuple[Path, Path]:
    """A checkout holding the Redis-deduping Stripe consumer (TTL 300 s) and its spec — two replicas,
    services: [redis] — for the lab to serve confined (``--checkout``): (checkout, spec inside it)."""
    import shutil

    shop = tmp / "shop"
    shop.mkdir()
    shutil.copy(ROOT / "tests" / "consumers" / "fleet_orders.py", shop / "orders.py")
    env = {
        "ACKLAB_TEST_DB_URL": SQLITE,
        "ACKLAB_TEST_DEDUPE": "redis",
        "ACKLAB_TEST_TTL_S": "300",
        "REDIS_URL": "{{redis_url}}",
    }
    spec = target_spec(
        "confined-orders",
        "http://127.0.0.1:{{port}}/stripe",
        signing={"scheme": "stripe", "secret": "env:ACKLAB_TEST_STRIPE_SECRET"},
        event=STRIPE_EVENT,
        effects={
            "sql": {"url": SQLITE, "count": "SELECT count(*) FROM fulfilments WHERE event_id = :event_id"}
        },
        expect={"max_effects": 1, "conflict": "ignore"},
        command={
            "argv": [
                sys.executable,
                "-m",
                "gunicorn",
                "--workers",
                "1",
                "--bind",
                "127.0.0.1:{{port}}",
                "orders:create_app()",
            ],
            "env": env,
            "ready_timeout_s": 60,
        },
    )
    spec |= {
        "services": ["redis"],
        "topology": {"replicas": 2},
        "setup": {"argv": [sys.executable, "-c", "import orders; orders.migrate()"]},
    }
    return shop, write(shop / "shop.target.yaml", spec)
