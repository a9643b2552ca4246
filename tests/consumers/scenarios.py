"""The consumers of `tests.consumers` as scenarios: a running service, its target spec, and the
verdicts the lab must give it. The tests run each scenario a few times; ``bench/verdict_trust``
runs them the number of times the issues ask for (a reliability figure).

A scenario is started with ``with scenario.started():`` — services the lab does not start
itself (no ``command:``) run for the duration; those with ``command:`` are the lab's to start,
kill and restart.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from acklab.evidence.documents.verdicts import EXPERIMENT_NAMES
from acklab.harness.core.plan import RunSettings
from acklab.harness.engine.runner import RunOptions, RunResult, run
from acklab.harness.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
WEBHOOK_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSwQ1Rhc3Rz"
STRIPE_SECRET = "whsec_test_acklab_consumers_0123456789"
GITLAB_TOKEN = "ci-hook-token-0123456789abcdef"
GITHUB_SECRET = "gh-app-webhook-secret-0123456789"
SLACK_SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
SECRETS = {
    "ACKLAB_TEST_WEBHOOK_SECRET": WEBHOOK_SECRET,
    "ACKLAB_TEST_STRIPE_SECRET": STRIPE_SECRET,
    "ACKLAB_TEST_GITLAB_TOKEN": GITLAB_TOKEN,
    "ACKLAB_TEST_GITHUB_SECRET": GITHUB_SECRET,
    "ACKLAB_TEST_SLACK_SECRET": SLACK_SECRET,
}
# The experiments on one event (the first six of the one list of names): what every consumer faces.
DEFAULT_SET: tuple[str, ...] = EXPERIMENT_NAMES[:6]
STANDARD_EVENT = {
    "id": "{{event_id}}",
    "type": "payment.succeeded",
    "data": {"order_id": "{{order_id}}", "amount_cents": 1200},
}
STRIPE_EVENT = {
    "id": "{{event_id}}",
    "object": "event",
    "type": "payment_intent.succeeded",
    "data": {"object": {"order_id": "{{order_id}}", "amount_cents": 1200}},
}


def environment() -> dict[str, str]:
    """What a consumer process needs: the test secrets and this checkout on its path."""
    return {**os.environ, **SECRETS, "PYTHONPATH": str(ROOT)}


def module(name: str, *args: str) -> list[str]:
    return [sys.executable, "-m", f"tests.consumers.{name}", *args]


class Service:
    """A consumer started as a process of its own; ready once its port accepts connections."""

    def __init__(
        self,
        argv: Sequence[str],
        port: int,
        log: Path,
        *,
        env: Mapping[str, str] | None = None,
        grace_s: float = 10.0,
    ):
        # grace_s: how long SIGTERM may take before SIGKILL (a hung service never finishes it).
        self.argv, self.port, self.log, self.env, self.grace_s = list(argv), port, log, env, grace_s
        self._proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Service:
        with self.log.open("wb") as log:
            self._proc = subprocess.Popen(
                self.argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=dict(self.env or environment()),
                cwd=ROOT,
                start_new_session=True,
            )
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), 0.5):
                return self
            if self._proc.poll() is not None or time.monotonic() > deadline:
                self.__exit__()
                raise RuntimeError(
                    f"{self.argv} did not serve on {self.port}:\n{self.log.read_text()[-2000:]}"
                )
            time.sleep(0.05)

    def __exit__(self, *exc: object) -> None:
        if self._proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self._proc.pid, signal.SIGTERM)
        try:
            self._proc.wait(self.grace_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._proc.pid, signal.SIGKILL)
            self._proc.wait(10)
        self._proc = None


def target_spec(
    name: str,
    endpoint: str,
    *,
    signing: Mapping[str, str],
    event: Mapping[str, Any],
    effects: Mapping[str, Any],
    expect: Mapping[str, Any] | None = None,
    conflict: Mapping[str, Any] | None = None,
    command: Mapping[str, Any] | None = None,
    timeout_s: float = 2.0,
) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "apiVersion": "acklab/v1",
        "kind": "target",
        "name": name,
        "endpoint": endpoint,
        "signing": dict(signing),
        "delivery": {"timeout_s": timeout_s},
        "event": dict(event),
        "effects": dict(effects),
    }
    if conflict is not None:
        doc["conflict"] = dict(conflict)
    if expect is not None:
        doc["expect"] = dict(expect)
    if command is not None:
        doc["command"] = dict(command)
    return doc


@dataclass
class Scenario:
    """A consumer, its spec, the experiments to run and the verdict each must get."""

    name: str
    spec: Path
    experiments: tuple[str, ...]
    expected: dict[str, str]  # experiment -> verdict ("pass", "fail", "skipped")
    service: Service | None = None
    trials: int = 1
    settings: RunSettings = field(default_factory=RunSettings)

    @contextlib.contextmanager
    def started(self) -> Iterator[Scenario]:
        with self.service if self.service is not None else contextlib.nullcontext():
            yield self

    def run(self, out: Path, *, trials: int | None = None, seed: int | None = None) -> RunResult:
        options = RunOptions(
            target=str(self.spec),
            experiments=self.experiments,
            trials=trials or self.trials,
            seed=seed,
            out=out,
            journal=False,
            settings=self.settings,
        )
        with contextlib.ExitStack() as stack:
            for key, value in SECRETS.items():
                stack.enter_context(_env(key, value))
            return run(options)

    def mismatches(self, result: RunResult) -> list[str]:
        """How `result` differs from what this consumer must get (empty: as expected)."""
        got = {e["name"]: e for e in result.run["experiments"]}
        found = []
        for name, verdict in self.expected.items():
            entry = got.get(name)
            if entry is None or entry["verdict"] != verdict:
                seen = entry and (entry["verdict"], entry.get("reason"), entry["violations"][:1])
                found.append(f"{name}: expected {verdict}, got {seen}")
        return found


@contextlib.contextmanager
def _env(key: str, value: str) -> Iterator[None]:
    before = os.environ.get(key)
    os.environ[key] = value
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = before


def write(path: Path, doc: Mapping[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(dict(doc), sort_keys=False))
    return path


def sqlite_url(path: Path) -> str:
    return f"sqlite:///{path}"


# -- verdicts a maintainer can trust (docs/verdicts.md) ----------------------------------------


def ack_then_process(
    tmp: Path,
    mode: str,
    db_url: str,
    *,
    experiments: tuple[str, ...] = (),
    work_s: tuple[float, float] | None = None,
    hold: bool = False,
) -> Scenario:
    """FastAPI, 2xx first, the payment row 50-500 ms later (``duplicates`` or ``correct``;
    `work_s`: another range of seconds; `hold`: only once another event's delivery came)."""
    port = free_port()
    spec = target_spec(
        f"ack-then-process-{mode}",
        f"http://127.0.0.1:{port}/webhooks/payments",
        signing={"scheme": "standard", "secret": "env:ACKLAB_TEST_WEBHOOK_SECRET"},
        event=STANDARD_EVENT,
        conflict={"set": {"data.amount_cents": 9900}},
        effects={"sql": {"url": db_url, "count": "SELECT count(*) FROM payments WHERE event_id = :event_id"}},
        expect={"max_effects": 1, "effects_within_s": 1.0},
    )
    chosen = experiments or ("lost-ack", "concurrent-duplicates")
    verdict = "fail" if mode == "duplicates" else "pass"
    work_argv = (("--work-s", *map(str, work_s)) if work_s else ()) + (("--hold",) if hold else ())
    return Scenario(
        f"ack-then-process ({mode})",
        write(tmp / f"ack-{mode}.yaml", spec),
        chosen,
        dict.fromkeys(chosen, verdict),
        Service(
            module("ack_then_process", "--port", str(port), "--db", db_url, "--mode", mode, *work_argv),
            port,
            tmp / f"ack-{mode}.log",
        ),
    )


def dedupe_by_id(tmp: Path, mode: str, conflict: str) -> Scenario:
    """Stripe's dedupe by event id: 2xx to a known id; ``overwrite`` also stores the new amount."""
    port = free_port()
    db = tmp / f"dedupe-{mode}.sqlite"
    expect: dict[str, Any] = {"max_effects": 1} | ({"conflict": "ignore"} if conflict == "ignore" else {})
    spec = target_spec(
        f"dedupe-{mode}",
        f"http://127.0.0.1:{port}/stripe",
        signing={"scheme": "stripe", "secret": "env:ACKLAB_TEST_STRIPE_SECRET"},
        event=STRIPE_EVENT,
        conflict={"set": {"data.object.amount_cents": 9900}},
        effects={
            "sql": {
                "url": sqlite_url(db),
                "count": "SELECT count(*) FROM orders WHERE event_id = :event_id",
                "state": "SELECT order_id, amount_cents FROM orders WHERE event_id = :event_id",
            }
        },
        expect=expect,
    )
    verdict = "pass" if (mode, conflict) == ("ignore", "ignore") else "fail"
    return Scenario(
        f"dedupe-by-id ({mode}) under conflict: {conflict}",
        write(tmp / f"dedupe-{mode}-{conflict}.yaml", spec),
        ("conflicting-payload",),
        {"conflicting-payload": verdict},
        Service(
            module("dedupe_by_id", "--port", str(port), "--db", str(db), "--mode", mode),
            port,
            tmp / f"dedupe-{mode}-{conflict}.log",
        ),
    )


def gunicorn_receipts(tmp: Path, db_url: str, *, workers: int = 2) -> Scenario:
    """A WSGI consumer under gunicorn with several workers; the lab kills and restarts it."""
    port = free_port()
    spec = target_spec(
        "gunicorn-receipts",
        f"http://127.0.0.1:{port}/hooks",
        signing={"scheme": "standard", "secret": "env:ACKLAB_TEST_WEBHOOK_SECRET"},
        event=STANDARD_EVENT,
        effects={
            "sql": {"url": db_url, "count": "SELECT count(*) FROM fulfillments WHERE event_id = :event_id"}
        },
        command={
            "argv": [
                sys.executable,
                "-m",
                "gunicorn",
                *("--workers", str(workers), "--bind", f"127.0.0.1:{port}"),
                *("--graceful-timeout", "1", "--log-level", "warning"),
                "tests.consumers.wsgi_receipts:create_app()",
            ],
            "env": {"ACKLAB_TEST_DB_URL": db_url, "PYTHONPATH": str(ROOT)},
            "cwd": str(ROOT),
            "ready_timeout_s": 30,
        },
    )
    return Scenario(
        f"gunicorn --workers {workers}",
        write(tmp / "gunicorn.yaml", spec),
        ("crash-after-commit",),
        {"crash-after-commit": "pass"},
        trials=2,
    )


def fast_receiver(tmp: Path) -> Scenario:
    """Slow for its first three requests (the calibration), about a millisecond after.

    Each cold request takes 400 ms, so the calibrated first timeout (half the fastest answer: 200 ms)
    stays far above a warm answer even on a loaded machine: at 80 ms (a 40 ms timeout) a warm answer
    slowed by four test workers on two cores outlasted it once, and the first try landed."""
    port = free_port()
    db = tmp / "fast.sqlite"
    spec = target_spec(
        "fast-receiver",
        f"http://127.0.0.1:{port}/hooks",
        signing={"scheme": "standard", "secret": "env:ACKLAB_TEST_WEBHOOK_SECRET"},
        event=STANDARD_EVENT,
        effects={
            "sql": {
                "url": sqlite_url(db),
                "count": "SELECT count(*) FROM deliveries WHERE event_id = :event_id",
            }
        },
    )
    return Scenario(
        "fast receiver",
        write(tmp / "fast.yaml", spec),
        ("timeout-overlap",),
        {},  # pass or error, never a pass without the fault (checked by the caller)
        Service(
            module("fast_receiver", "--port", str(port), "--db", str(db), "--cold-ms", "400"),
            port,
            tmp / "fast.log",
        ),
        trials=2,
    )


def gitlab_token_hook(tmp: Path) -> Scenario:
    """A CI server's GitLab push hook: X-Gitlab-Token only (no body signature)."""
    port = free_port()
    db = sqlite_url(tmp / "ci.sqlite")
    spec = target_spec(
        "ci-gitlab-hook",
        f"http://127.0.0.1:{port}/hooks/gitlab",
        signing={"scheme": "gitlab", "secret": "env:ACKLAB_TEST_GITLAB_TOKEN"},
        event={
            "object_kind": "push",
            "type": "Push",
            "ref": "refs/heads/main",
            "checkout_sha": "{{event_id}}",
            "project": {"id": 1, "path_with_namespace": "acme/shop"},
        },
        effects={"sql": {"url": db, "count": "SELECT count(*) FROM builds WHERE event_uuid = :event_id"}},
    )
    return Scenario(
        "GitLab token-only hook",
        write(tmp / "gitlab.yaml", spec),
        ("replay",),
        {"replay": "pass"},
        Service(module("gitlab_hook", "--port", str(port), "--db", db), port, tmp / "gitlab.log"),
    )


def alert_hook(tmp: Path) -> Scenario:
    """An Alertmanager receiver: scheme none, an HTTP effects probe, dedupe by groupKey."""
    port = free_port()
    db = tmp / "alerts.sqlite"
    spec = target_spec(
        "alert-hook",
        f"http://127.0.0.1:{port}/alertmanager",
        signing={"scheme": "none"},
        event={
            "version": "4",
            "groupKey": "{{event_id}}",
            "status": "firing",
            "receiver": "pager",
            "alerts": [{"status": "firing", "labels": {"alertname": "DiskFull", "instance": "{{order_id}}"}}],
        },
        conflict={"set": {"status": "resolved"}},
        effects={
            "http": {
                "url": f"http://127.0.0.1:{port}/alerts?resource={{{{event_id}}}}",
                "json_path": "total",
                "state_path": "first.status",
            }
        },
        expect={"max_effects": 1, "conflict": "ignore"},
    )
    expected = dict.fromkeys(DEFAULT_SET, "pass") | {"replay": "skipped"}
    return Scenario(
        "Alertmanager receiver (scheme none)",
        write(tmp / "alerts.yaml", spec),
        (),
        expected,
        Service(module("alert_hook", "--port", str(port), "--db", str(db)), port, tmp / "alerts.log"),
    )


# -- slow boots, events never acknowledged (docs/acknowledgement.md) ---------------------------

SLOW_BOOT_EXPECTED: dict[str, dict[str, str]] = {
    "no-dedupe": {"lost-ack": "fail", "concurrent-duplicates": "fail", "crash-after-commit": "fail"},
    "receipt": dict.fromkeys((*DEFAULT_SET, "crash-after-commit"), "pass"),
    "fails-after-commit": {"lost-ack": "fail"},
}


def slow_boot(tmp: Path, variant: str, db_url: str, *, boot_s: float = 3.0, ready: bool = False) -> Scenario:
    """503 for `boot_s` after every start; configured from ``slow_boot.json`` in its own folder."""
    port = free_port()
    site = tmp / f"site-{variant}"
    site.mkdir()
    (site / "slow_boot.json").write_text(json.dumps({"db": db_url, "variant": variant, "boot_s": boot_s}))
    command: dict[str, Any] = {
        "argv": [sys.executable, "-m", "tests.consumers.slow_boot", "--port", str(port)],
        "cwd": site.name,  # relative to the spec file's folder
        "env": {"PYTHONPATH": str(ROOT)},
        "ready_timeout_s": boot_s + 20,
    }
    if ready:
        command["ready"] = {"url": f"http://127.0.0.1:{port}/health", "status": [200]}
    spec = target_spec(
        f"slow-boot-{variant}",
        f"http://127.0.0.1:{port}/webhooks/stripe",
        signing={"scheme": "stripe", "secret": "env:ACKLAB_TEST_STRIPE_SECRET"},
        event=STRIPE_EVENT,
        conflict={"set": {"data.object.amount_cents": 9900}},
        effects={"sql": {"url": db_url, "count": "SELECT count(*) FROM payments WHERE event_id = :event_id"}},
        expect={"max_effects": 1, "conflict": "ignore"},
        command=command,
    )
    expected = SLOW_BOOT_EXPECTED[variant]
    return Scenario(
        f"slow boot ({variant})",
        write(tmp / f"slow-boot-{variant}.yaml", spec),
        tuple(expected),
        dict(expected),
    )


Builder = Callable[..., Scenario]


# -- acknowledgement as the sender saw it, hangs, crashes (docs/acknowledgement.md) ------------


def async_orders(
    tmp: Path,
    mode: str,
    experiments: tuple[str, ...],
    expected: str,
    *,
    settings: RunSettings | None = None,
    timeout_s: float = 2.0,
    effects: Mapping[str, Any] | None = None,
) -> Scenario:
    """FastAPI ``async def`` routes over sqlite3 (`tests.consumers.async_orders`): SQL on the event
    loop (``blocking``), in a worker thread (``thread``), no response (``never-answers``), every
    duplicate answered 500 (``duplicate-500``)."""
    port = free_port()
    db = tmp / f"orders-{mode}.sqlite"
    count = "SELECT count(*) FROM fulfilments WHERE event_id = :event_id"
    spec = target_spec(
        f"async-orders-{mode}",
        f"http://127.0.0.1:{port}/orders",
        signing={"scheme": "standard", "secret": "env:ACKLAB_TEST_WEBHOOK_SECRET"},
        event=STANDARD_EVENT,
        effects=effects or {"sql": {"url": sqlite_url(db), "count": count}},
        timeout_s=timeout_s,
    )
    return Scenario(
        f"async orders ({mode})",
        write(tmp / f"orders-{mode}.yaml", spec),
        experiments,
        dict.fromkeys(experiments, expected),
        Service(
            module("async_orders", "--port", str(port), "--db", str(db), "--mode", mode),
            port,
            tmp / f"orders-{mode}.log",
            grace_s=10.0 if mode in ("thread", "duplicate-500") else 0.5,
        ),
        settings=settings or RunSettings(handler_timeout_s=3.0, burst=8),
    )


def fast_ledger(tmp: Path, mode: str, *, workers: int = 2, trials: int = 2) -> Scenario:
    """A fast gunicorn service (`tests.consumers.fast_ledger`) counted over its own HTTP endpoint;
    the lab starts, kills and restarts it for crash-after-commit."""
    port = free_port()
    db = tmp / f"ledger-{mode}.sqlite"
    spec = target_spec(
        f"fast-ledger-{mode}",
        f"http://127.0.0.1:{port}/hooks",
        signing={"scheme": "standard", "secret": "env:ACKLAB_TEST_WEBHOOK_SECRET"},
        event=STANDARD_EVENT,
        effects={"http": {"url": f"http://127.0.0.1:{port}/ledger/{{{{event_id}}}}", "json_path": "count"}},
        command={
            "argv": [
                sys.executable,
                "-m",
                "gunicorn",
                *("--workers", str(workers), "--bind", f"127.0.0.1:{port}"),
                *("--graceful-timeout", "1", "--log-level", "warning"),
                "tests.consumers.fast_ledger:create_app()",
            ],
            "env": {"ACKLAB_TEST_DB_PATH": str(db), "ACKLAB_TEST_LEDGER_MODE": mode, "PYTHONPATH": str(ROOT)},
            "cwd": str(ROOT),
            "ready_timeout_s": 30,
        },
    )
    return Scenario(
        f"fast ledger ({mode}) under gunicorn --workers {workers}",
        write(tmp / f"ledger-{mode}.yaml", spec),
        ("crash-after-commit",),
        {"crash-after-commit": "pass" if mode == "durable" else "fail"},
        trials=trials,
    )


def answers_first(tmp: Path, mode: str) -> Scenario:
    """202 first, the work in a worker thread (`tests.consumers.answers_first`): kept in memory
    (``memory``) or in a durable inbox table (``durable``); the lab starts, kills and restarts it."""
    port = free_port()
    db = tmp / f"inbox-{mode}.sqlite"
    spec = target_spec(
        f"answers-first-{mode}",
        f"http://127.0.0.1:{port}/shipments",
        signing={"scheme": "standard", "secret": "env:ACKLAB_TEST_WEBHOOK_SECRET"},
        event=STANDARD_EVENT,
        effects={
            "sql": {
                "url": sqlite_url(db),
                "count": "SELECT count(*) FROM fulfilments WHERE event_id = :event_id",
            }
        },
        expect={"max_effects": 1, "effects_within_s": 1.5},
        command={
            "argv": module("answers_first", "--port", str(port), "--db", str(db), "--mode", mode),
            "env": {"PYTHONPATH": str(ROOT)},
            "cwd": str(ROOT),
            "ready_timeout_s": 30,
        },
    )
    return Scenario(
        f"answers first ({mode})",
        write(tmp / f"inbox-{mode}.yaml", spec),
        ("crash-after-ack", "crash-after-commit"),
        {"crash-after-ack": "pass" if mode == "durable" else "fail", "crash-after-commit": "skipped"},
    )


def late_routes(tmp: Path, *, ready: Mapping[str, Any], routes_after_s: float = 2.0) -> Scenario:
    """Health first, webhook routes `routes_after_s` later (`tests.consumers.late_routes`), started by the lab."""
    port = free_port()
    db = tmp / "late.sqlite"
    spec = target_spec(
        "late-routes",
        f"http://127.0.0.1:{port}/hooks",
        signing={"scheme": "standard", "secret": "env:ACKLAB_TEST_WEBHOOK_SECRET"},
        event=STANDARD_EVENT,
        effects={
            "sql": {"url": sqlite_url(db), "count": "SELECT count(*) FROM runs WHERE event_id = :event_id"}
        },
        command={
            "argv": module(
                "late_routes", "--port", str(port), "--db", str(db), "--routes-after", str(routes_after_s)
            ),
            "env": {"PYTHONPATH": str(ROOT)},
            "cwd": str(ROOT),
            "ready_timeout_s": 30,
            "ready": {"url": f"http://127.0.0.1:{port}/health", **ready},
        },
    )
    return Scenario("late routes", write(tmp / "late.yaml", spec), ("lost-ack",), {"lost-ack": "pass"})
