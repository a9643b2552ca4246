"""Consumers behind a queue (`queued_orders` with Celery, RQ, Dramatiq or a plain list; `bullmq_orders` on Node) as
scenarios: their target specs — ``services: [redis]``, ``workers:``, ``queues:`` — and the verdict
each must get. The lab starts the handler, the workers and the broker itself."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any

import yaml

from tests.consumers.scenarios import ROOT, STRIPE_EVENT, Scenario, module, target_spec, write

QUEUE_EXPERIMENTS = (
    "worker-crash-after-effect",
    "visibility-timeout",
    "late-duplicate-job",
    "broker-restart",
    "enqueue-lost",
)
SQLITE = "sqlite:///{{scratch}}/orders.sqlite"
KEYS = {
    "celery": ["celery", "unacked"],
    "rq": ["rq:queue:orders", "rq:wip:orders"],
    "dramatiq": ["dramatiq:orders", "dramatiq:__acks__.*"],
    "list": ["orders:jobs"],
}


def worker_argv(kind: str) -> list[str]:
    if kind == "celery":
        return [
            sys.executable,
            *("-m", "celery", "-A", "tests.consumers.celery_orders", "worker"),
            *(
                "--pool",
                "solo",
                "--loglevel",
                "INFO",
                "--without-mingle",
                "--without-gossip",
                "--without-heartbeat",
            ),
        ]
    if kind == "rq":
        return [
            sys.executable,
            *("-m", "rq.cli", "worker", "--url", "{{redis_url}}", "--worker-class"),
            *("rq.worker.SimpleWorker", "orders"),
        ]
    if kind == "list":
        return [sys.executable, "-m", "tests.consumers.list_worker"]
    return [
        sys.executable,
        *("-m", "dramatiq", "tests.consumers.dramatiq_orders", "--processes", "1", "--threads", "1"),
    ]


READY = {
    "celery": r"ready\.",
    "rq": r"Listening on",
    "dramatiq": r"ready for action",
    "list": r"list worker ready",
}


def queued_orders(
    tmp: Path,
    kind: str,
    experiments: tuple[str, ...],
    expected: dict[str, str],
    *,
    effect: str = "insert",
    on_enqueue_error: int = 503,
    workers: int = 1,
    env: dict[str, str] | None = None,
    queue_options: dict[str, Any] | None = None,
    label: str = "",
) -> Scenario:
    """A Stripe handler enqueueing with `kind` (celery, rq, dramatiq) and its workers, fulfilling with
    ``insert`` or ``keyed`` effects."""
    shared = {
        "ACKLAB_TEST_DB_URL": SQLITE,
        "ACKLAB_TEST_QUEUE": kind,
        "ACKLAB_TEST_EFFECT": effect,
        "ACKLAB_TEST_ON_ENQUEUE_ERROR": str(on_enqueue_error),
        "ACKLAB_TEST_STRIPE_SECRET": "env:ACKLAB_TEST_STRIPE_SECRET",
        "REDIS_URL": "{{redis_url}}",
        "PYTHONPATH": str(ROOT),
        **(env or {}),
    }
    spec = target_spec(
        f"{kind}-orders-{effect}",
        "http://127.0.0.1:{{port}}/stripe",
        signing={"scheme": "stripe", "secret": "env:ACKLAB_TEST_STRIPE_SECRET"},
        event=STRIPE_EVENT,
        conflict={"set": {"data.object.amount_cents": 9900}},
        effects={
            "sql": {"url": SQLITE, "count": "SELECT count(*) FROM fulfilments WHERE event_id = :event_id"}
        },
        expect={"max_effects": 1, "conflict": "ignore"},
        command={"argv": module("queued_orders", "--port", "{{port}}"), "env": shared, "cwd": str(ROOT)},
    )
    spec["setup"] = {
        "argv": [sys.executable, "-c", "from tests.consumers.queued_orders import migrate; migrate()"],
        "env": shared,
    }
    spec["services"] = ["redis"]
    spec["workers"] = [
        {
            "argv": worker_argv(kind),
            "env": shared,
            "cwd": str(ROOT),
            "count": workers,
            "ready": {"log": READY[kind]},
            "ready_timeout_s": 60,
        }
    ]
    spec["queues"] = {"keys": KEYS[kind], **(queue_options or {})} if queue_options else KEYS[kind]
    name = f"{kind}-{effect}-{workers}w{label}"
    return Scenario(
        f"{kind} orders ({name})", write(tmp / f"queued-{name}.yaml", spec), experiments, expected
    )


def keyed_orders(tmp: Path, kind: str, experiments: tuple[str, ...], **options: Any) -> Scenario:
    """`queued_orders` with the effect keyed by the event id: the correct consumer, which must pass
    every one of `experiments` (`options`: workers, env... as `queued_orders` takes them)."""
    return queued_orders(
        tmp, kind, experiments, dict.fromkeys(experiments, "pass"), effect="keyed", **options
    )


def bullmq_orders(tmp: Path, remove_on_complete: str, expected: dict[str, str]) -> Scenario:
    """The BullMQ consumer (`tests/consumers/bullmq_orders`, on Node): a job per event deduplicated by
    ``jobId``, completed jobs removed (``true``) or kept three days (``age``)."""
    node = shutil.which("node") or "node"
    folder = ROOT / "tests" / "consumers" / "bullmq_orders"
    env = {
        "ACKLAB_TEST_REMOVE_ON_COMPLETE": remove_on_complete,
        "ACKLAB_TEST_STRIPE_SECRET": "env:ACKLAB_TEST_STRIPE_SECRET",
        "REDIS_URL": "{{redis_url}}",
        "NODE_PATH": str(ROOT / ".tools" / "node_modules"),
    }
    spec = target_spec(
        f"bullmq-orders-{remove_on_complete}",
        "http://127.0.0.1:{{port}}/stripe",
        signing={"scheme": "stripe", "secret": "env:ACKLAB_TEST_STRIPE_SECRET"},
        event=STRIPE_EVENT,
        conflict={"set": {"data.object.amount_cents": 9900}},
        effects={"http": {"url": "http://127.0.0.1:{{port}}/effects/{{event_id}}", "json_path": "count"}},
        expect={"max_effects": 1, "conflict": "ignore"},
        command={
            "argv": [node, str(folder / "handler.cjs"), "{{port}}", "{{scratch}}/fulfilments.jsonl"],
            "env": env,
            "cwd": str(folder),
        },
    )
    spec["services"] = ["redis"]
    spec["workers"] = [
        {
            "argv": [node, str(folder / "worker.cjs"), "{{scratch}}/fulfilments.jsonl"],
            "env": env,
            "cwd": str(folder),
            "ready": {"log": "bullmq worker ready"},
        }
    ]
    spec["queues"] = [
        "bull:orders:wait",
        "bull:orders:active",
        "bull:orders:delayed",
        "bull:orders:prioritized",
    ]
    experiments = tuple(expected)
    return Scenario(
        f"BullMQ orders (removeOnComplete: {remove_on_complete})",
        write(tmp / f"bullmq-{remove_on_complete}.yaml", spec),
        experiments,
        expected,
    )


# For worker-crash-after-effect: the lab must stop the worker between the job's effect and its
# acknowledgement; a warehouse call of 0.8 s keeps that window open on a loaded machine, and a
# visibility timeout of 4 s keeps a job that ran slowly from being handed out again unkilled.
CRASH_WINDOW = {"ACKLAB_TEST_VISIBILITY_S": "4", "ACKLAB_TEST_AFTER_S": "0.8"}


def confined_celery(tmp: Path, effect: str) -> tuple[Path, Path]:
    """A checkout holding the Celery consumer and its spec, for the lab to serve confined (``--checkout``):
    the handler, the workers and the broker in the sandbox; (checkout, spec inside it)."""
    shop = tmp / "shop"
    package = shop / "tests" / "consumers"
    package.mkdir(parents=True)
    for name in ("__init__.py", "queued_orders.py", "celery_orders.py", "json_http.py"):
        shutil.copy(ROOT / "tests" / "consumers" / name, package / name)
    (shop / "tests" / "__init__.py").write_text("")
    scenario = queued_orders(tmp, "celery", (), {}, effect=effect, workers=2, env=CRASH_WINDOW)
    spec = yaml.safe_load(scenario.spec.read_text())
    for part in (spec["command"], spec["setup"], *spec["workers"]):
        part["env"]["PYTHONPATH"] = "."
        part.pop("cwd", None)
    return shop, write(shop / "orders.target.yaml", spec)
