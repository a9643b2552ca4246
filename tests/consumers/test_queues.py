"""Consumers behind a queue: real Redis, real Celery, RQ, Dramatiq and BullMQ workers, started by the
lab. One run per behaviour here; the 20-run loops and the cost are the bench's (bench/queues.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from acklab.harness.engine.results import RunResult
from tests.consumers import queue_scenarios
from tests.consumers.queue_scenarios import QUEUE_EXPERIMENTS
from tests.consumers.scenarios import DEFAULT_SET

pytestmark = [pytest.mark.slow, pytest.mark.redis]
SHORT_VISIBILITY = {"ACKLAB_TEST_VISIBILITY_S": "2"}


def trials(result: RunResult, experiment: str) -> list[dict[str, Any]]:
    return [
        json.loads(p.read_text()) for p in sorted((result.bundle / "trials").glob(f"{experiment}-*.json"))
    ]


def steps(trial: dict[str, Any]) -> list[tuple[str, str]]:
    return [(j["by"], j["step"]) for j in trial["jobs"]]


def test_celery_with_acks_late_and_a_non_idempotent_task_fulfils_twice_when_its_worker_dies_after_the_effect(
    tmp_path: Path,
) -> None:
    scenario = queue_scenarios.queued_orders(
        tmp_path,
        "celery",
        ("worker-crash-after-effect",),
        {"worker-crash-after-effect": "fail"},
        env=queue_scenarios.CRASH_WINDOW,
    )
    result = scenario.run(tmp_path / "out")
    assert scenario.mismatches(result) == []
    assert result.exit_code == 1
    (trial,) = trials(result, "worker-crash-after-effect")
    (violation,) = trial["violations"]
    assert (violation["invariant"], violation["observed"]) == ("at-most-once-effect", 2)
    # The proof: the job was still in Celery's unacked hash when the worker was stopped with its effect.
    assert trial["fault"]["tries"][-1]["facts"]["queue_at_kill"] == {"unacked": 1}
    # The job's life: enqueued by the handler, taken by the worker, killed, restarted, handed out again.
    life = steps(trial)
    for step in [
        ("broker", "enqueued"),
        ("broker", "taken"),
        ("lab", "killed"),
        ("lab", "restarted"),
        ("broker", "requeued"),
    ]:
        assert step in life, life
    assert life.index(("lab", "killed")) < life.index(("broker", "requeued"))
    assert {j.get("worker") for j in trial["jobs"] if j["step"] == "taken"} == {"worker 1"}


def test_the_celery_twin_keyed_by_the_event_id_passes_every_queue_experiment(tmp_path: Path) -> None:
    scenario = queue_scenarios.keyed_orders(
        tmp_path, "celery", QUEUE_EXPERIMENTS, workers=2, env=SHORT_VISIBILITY
    )
    result = scenario.run(tmp_path / "out")
    assert scenario.mismatches(result) == []
    assert result.exit_code == 0
    (restart,) = trials(result, "broker-restart")
    facts = restart["fault"]["tries"][-1]["facts"]
    assert facts["queue_before_restart"] == facts["queue_after_restart"] == {"celery": 1}
    (held,) = trials(result, "visibility-timeout")
    facts = held["fault"]["tries"][-1]["facts"]
    # Celery's visibility timeout (2 s) is below the hold (5 s): the other worker took the job again.
    assert facts["taken_again_by"] not in (None, facts["held_by"])
    (refused,) = trials(result, "enqueue-lost")
    assert refused["fault"]["tries"][-1]["facts"]["refused"]["lpush"] >= 1
    assert refused["deliveries"][0]["status"] == 503  # kombu's publish failed: the handler said so


@pytest.mark.parametrize(
    ("heartbeat_ms", "effect", "verdict"),
    [("1000", "insert", "fail"), ("60000", "insert", "pass"), ("1000", "keyed", "pass")],
)
def test_a_dramatiq_job_that_outlives_the_heartbeat_timeout_runs_twice_unless_the_timeout_is_raised_or_the_effect_keyed(
    tmp_path: Path, heartbeat_ms: str, effect: str, verdict: str
) -> None:
    scenario = queue_scenarios.queued_orders(
        tmp_path,
        "dramatiq",
        ("visibility-timeout",),
        {"visibility-timeout": verdict},
        effect=effect,
        workers=2,
        env={"ACKLAB_TEST_HEARTBEAT_MS": heartbeat_ms},
        queue_options={"hold_s": 4},
    )
    result = scenario.run(tmp_path / "out")
    assert scenario.mismatches(result) == []
    (trial,) = trials(result, "visibility-timeout")
    facts = trial["fault"]["tries"][-1]["facts"]
    if heartbeat_ms == "60000":
        assert facts["taken_again_by"] is None
        assert facts["held_s"] >= 4
    else:  # the frozen worker's heartbeat went stale: another one requeued its message and took it
        assert facts["taken_again_by"] not in (None, facts["held_by"])
        assert ("broker", "requeued") in steps(trial)


@pytest.mark.parametrize(("on_error", "verdict"), [(200, "fail"), (503, "pass")])
def test_an_rq_handler_answering_200_when_its_enqueue_failed_loses_the_event(
    tmp_path: Path, on_error: int, verdict: str
) -> None:
    scenario = queue_scenarios.queued_orders(
        tmp_path, "rq", ("enqueue-lost",), {"enqueue-lost": verdict}, on_enqueue_error=on_error
    )
    result = scenario.run(tmp_path / "out")
    assert scenario.mismatches(result) == []
    (trial,) = trials(result, "enqueue-lost")
    assert trial["fault"]["landed"] is True
    if verdict == "fail":
        (violation,) = trial["violations"]
        assert violation["invariant"] == "acked-exactly-once"
        assert "queue drained" in violation["detail"]
    else:  # refused, answered 503, retried once the broker took writes again: one fulfilment
        assert [d["status"] for d in trial["deliveries"]] == [503, 200]


@pytest.mark.node
@pytest.mark.parametrize(("remove", "verdict"), [("true", "fail"), ("age", "pass")])
def test_bullmq_s_jobid_dedupe_forgets_a_job_removed_on_complete(
    tmp_path: Path, remove: str, verdict: str
) -> None:
    scenario = queue_scenarios.bullmq_orders(
        tmp_path, remove, {"lost-ack": "pass", "late-duplicate-job": verdict}
    )
    result = scenario.run(tmp_path / "out")
    assert scenario.mismatches(result) == []
    (trial,) = trials(result, "late-duplicate-job")
    life = steps(trial)
    # The first job completed and left the queue before the provider's retry was sent.
    assert life.index(("lab", "done")) > life.index(("broker", "taken"))


def test_a_confined_celery_consumer_gets_its_workers_and_broker_inside_its_sandbox(tmp_path: Path) -> None:
    from acklab.flows.sandbox import choose
    from acklab.harness.engine.runner import RunOptions, run

    checkout, spec = queue_scenarios.confined_celery(tmp_path, "insert")
    out = tmp_path / "out"
    confinement = choose(hide=(out.resolve(),))
    result = run(
        RunOptions(
            target=spec.name,
            checkout=checkout,
            experiments=("worker-crash-after-effect", "broker-restart", "visibility-timeout"),
            trials=1,
            out=out,
            journal=False,
            confinement=confinement,
        )
    )
    got = {e["name"]: e for e in result.run["experiments"]}
    assert got["worker-crash-after-effect"]["verdict"] == "fail", got["worker-crash-after-effect"]
    # The broker, bridged into its own namespace, restarted with what it held; the workers found it.
    assert got["broker-restart"]["verdict"] == "pass"
    (trial,) = trials(result, "worker-crash-after-effect")
    assert ("lab", "killed") in steps(trial)
    assert ("broker", "taken") in steps(trial)
    if confinement.name.startswith("bubblewrap"):
        # The broker behind the lab's bridge: its clients are not told apart by worker.
        assert got["visibility-timeout"]["verdict"] == "skipped"
        assert "network namespace of its own" in got["visibility-timeout"]["reason"]
        assert {j.get("worker") for j in trial["jobs"] if j["by"] == "broker"} == {None}


def test_a_plain_list_workers_job_is_counted_once_the_worker_let_go_of_it(tmp_path: Path) -> None:
    # BRPOP, then 0.3 s of the provider's API before the effect: the job is in no key
    # meanwhile, so an empty list is not a drained queue while the worker holds what it popped.
    scenario = queue_scenarios.keyed_orders(
        tmp_path, "list", DEFAULT_SET, env={"ACKLAB_TEST_BEFORE_S": "0.3"}
    )
    result = scenario.run(tmp_path / "out")
    assert scenario.mismatches(result) == []
    assert {e["fault_landed"] for e in result.run["experiments"]} == {1}
