"""workers: and queues: in a target spec — read and checked before anything is started — and the
queue experiments' reasons to skip a consumer that is not behind a queue."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from acklab.harness.engine.runner import choose_experiments
from acklab.harness.errors import SpecError
from acklab.harness.specs.target import load_target_spec
from acklab.harness.targets.capabilities import NO_TAKER, Capabilities, Missing, Queue
from acklab.harness.targets.spec import load_target
from tests.harness.targets.test_fleet import spec  # a spec with command: and {{port}}

QUEUED = (
    "worker-crash-after-effect",
    "visibility-timeout",
    "late-duplicate-job",
    "broker-restart",
    "enqueue-lost",
)
WORKER = {
    "argv": [sys.executable, "-m", "celery", "-A", "shop.tasks", "worker"],
    "env": {"BROKER_URL": "{{redis_url}}"},
    "ready": {"log": r"ready\."},
}


def test_workers_and_queues_are_read_from_the_spec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = load_target(
        spec(
            tmp_path,
            monkeypatch,
            services=["redis"],
            workers=[{**WORKER, "count": 2}],
            queues={"keys": ["celery", "unacked"], "drained_within_s": 12, "hold_s": 3},
        ),
        allow_remote=False,
    )
    queueing = target.queueing
    assert (queueing.keys, queueing.drained_within_s, queueing.hold_s) == (("celery", "unacked"), 12.0, 3.0)
    assert target.capabilities().queue == Queue(workers=2)
    # Filled per run, like command:: the workers get the run's Redis.
    target.queueing.bind(
        load_target_spec(
            spec(
                tmp_path,
                monkeypatch,
                services=["redis"],
                workers=[{**WORKER, "env": {"BROKER_URL": "redis://127.0.0.1:7000/0"}}],
            )
        ),
        spec_dir=tmp_path,
        workdir=tmp_path,
    )
    (command,) = target.queueing.commands
    assert (command.env["BROKER_URL"], command.ready_log, command.cwd) == (
        "redis://127.0.0.1:7000/0",
        r"ready\.",
        tmp_path,
    )


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"queues": ["celery"]}, "add services: \\[redis\\]"),
        ({"services": ["redis"], "queues": []}, "queues"),
        ({"services": ["redis"], "workers": [{"argv": []}]}, "workers"),
        ({"services": ["redis"], "workers": [{**WORKER, "ready": {"line": "x"}}]}, "workers"),
        ({"services": ["redis"], "workers": [{**WORKER, "count": 9}, {**WORKER, "count": 9}]}, "at most 16"),
        ({"services": ["redis"], "queues": {"keys": ["celery"], "hold_s": -1}}, "queues"),
    ],
)
def test_queues_the_lab_cannot_watch_are_refused_before_anything_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, changes: dict[str, Any], message: str
) -> None:
    with pytest.raises(SpecError, match=message):
        load_target(spec(tmp_path, monkeypatch, **changes), allow_remote=False)


def test_the_queue_experiments_say_why_they_do_not_apply(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plain = load_target(spec(tmp_path, monkeypatch), allow_remote=False)
    chosen, skipped = choose_experiments(plain, QUEUED)
    assert chosen == []
    assert all("workers:" in skipped[name] and "queues:" in skipped[name] for name in QUEUED)
    one = load_target(
        spec(tmp_path, monkeypatch, services=["redis"], workers=[WORKER], queues=["celery", "unacked"]),
        allow_remote=False,
    )
    chosen, skipped = choose_experiments(one, QUEUED)
    # A held job needs another worker to take it.
    assert set(skipped) == {"visibility-timeout"}
    assert "at least 2 worker processes" in skipped["visibility-timeout"]
    no_workers = load_target(
        spec(tmp_path, monkeypatch, services=["redis"], queues=["celery"]), allow_remote=False
    )
    _, skipped = choose_experiments(no_workers, QUEUED)
    assert "has no workers" in skipped["broker-restart"]


def test_a_queue_behind_a_bridge_cannot_name_the_worker_that_took_a_job() -> None:
    can = Capabilities(process=Missing("none"), db_link=Missing("none"), queue=Queue(workers=2, named=False))
    assert can.lacks_queue(workers=2) is None
    assert can.lacks_queue(workers=2, named=True) == NO_TAKER
    assert "at least 3 worker processes" in (can.lacks_queue(workers=3) or "")
