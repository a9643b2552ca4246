"""Checkpoint and resume: a run killed with -9 (or stopped with SIGTERM) resumes with
``--resume RUN_ID`` and repeats no finished trial."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from acklab.evidence.bundle import verify

ACKLAB = [sys.executable, "-c", "import sys; from acklab.cli import main; main(sys.argv[1:])"]
TRIALS = 12


def start(out: Path) -> subprocess.Popen[bytes]:
    args = [
        "run",
        "--target",
        "fixture:live",
        "--experiment",
        "lost-ack",
        "--trials",
        str(TRIALS),
        "--seed",
        "7",
    ]
    return subprocess.Popen(
        [*ACKLAB, *args, "--out", str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )


def wait_for_trials(out: Path, at_least: int, timeout_s: float = 60) -> Path:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for bundle in out.glob("*/trials"):
            if len(list(bundle.glob("*.json"))) >= at_least:
                return bundle.parent
        time.sleep(0.02)
    raise AssertionError(f"no bundle under {out} reached {at_least} finished trials")


def snapshot(bundle: Path) -> dict[str, tuple[str, str]]:
    """trial id -> (started_at, sha256 of its file)."""
    found = {}
    for path in (bundle / "trials").glob("*.json"):
        record = json.loads(path.read_text())
        found[record["trial_id"]] = (record["started_at"], hashlib.sha256(path.read_bytes()).hexdigest())
    return found


def resume(out: Path, run_id: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*ACKLAB, "run", "--target", "fixture:live", "--resume", run_id, "--out", str(out), "--json"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def finish_and_check(out: Path, bundle: Path, before: dict[str, tuple[str, str]]) -> None:
    done = resume(out, bundle.name)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout)
    assert result["run_id"] == bundle.name
    assert result["experiments"][0]["trials"] == TRIALS
    after = snapshot(bundle)
    assert len(after) == TRIALS
    # Every trial finished before the interruption is untouched: same start, same bytes (the
    # final re-read is for the trials this process judged, against the service it still runs).
    assert {tid: after[tid] for tid in before} == before
    for path in (bundle / "trials").glob("*.json"):
        record = json.loads(path.read_text())
        assert ("late_read" in record) == (record["trial_id"] not in before)
    run = json.loads((bundle / "run.json").read_text())
    assert run["status"] == "complete"
    assert verify(bundle).ok


@pytest.mark.slow
def test_a_run_killed_with_sigkill_resumes_without_repeating_a_finished_trial(tmp_path):
    out = tmp_path / "out"
    process = start(out)
    bundle = wait_for_trials(out, 3)
    os.kill(process.pid, signal.SIGKILL)
    process.communicate(timeout=30)
    before = snapshot(bundle)
    assert 3 <= len(before) < TRIALS
    preliminary = json.loads((bundle / "run.json").read_text())
    assert preliminary["status"] == "interrupted"
    assert not (bundle / "manifest.json").exists()
    finish_and_check(out, bundle, before)


@pytest.mark.slow
def test_sigterm_exits_6_keeps_the_finished_trials_and_the_run_resumes(tmp_path):
    out = tmp_path / "out"
    process = start(out)
    bundle = wait_for_trials(out, 2)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 6, stderr.decode()[-2000:]
    assert f"--resume {bundle.name}" in stderr.decode()
    before = snapshot(bundle)
    assert json.loads((bundle / "run.json").read_text())["status"] == "interrupted"
    finish_and_check(out, bundle, before)


def test_resuming_an_unknown_run_is_invalid_input(tmp_path):
    done = resume(tmp_path / "out", "no-such-run")
    assert done.returncode == 3
    assert "no-such-run" in done.stderr


@pytest.mark.slow
def test_an_interrupted_runs_service_log_is_kept_and_the_resumed_one_follows_it(tmp_path):
    """A spec service stops with the interrupted process; its output must not stop with it."""
    from acklab.harness.procs.fixture_process import free_port
    from tests.harness.conftest import SECRET, SECRET_ENV, target_doc, write_spec

    root = Path(__file__).resolve().parents[2]
    port = free_port()
    db_url = f"sqlite:///{tmp_path / 'shop.db'}"
    doc = target_doc("shop", f"http://127.0.0.1:{port}/hooks", db_url)
    doc["command"] = {
        "argv": [
            *(sys.executable, "-m", "tests.harness.crash_service"),
            *("--variant", "receipt", "--port", str(port), "--db", db_url),
        ],
        "env": {"PYTHONPATH": str(root)},
        "ready_timeout_s": 30,
    }
    spec = write_spec(tmp_path / "shop.yaml", doc)
    env = {**os.environ, SECRET_ENV: SECRET}
    out = tmp_path / "out"
    args = ["run", "--target", str(spec), "--experiment", "lost-ack", "--trials", str(TRIALS)]
    process = subprocess.Popen(
        [*ACKLAB, *args, "--seed", "7", "--out", str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env,
    )
    bundle = wait_for_trials(out, 2)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 6, stderr.decode()[-2000:]
    first = (bundle / "service.log").read_bytes()
    assert first.startswith(b"--- acklab: start 1 of the service")
    assert b"crash_service: serving the receipt handler" in first

    done = subprocess.run(
        [*ACKLAB, "run", "--target", str(spec), "--resume", bundle.name, "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    log = (bundle / "service.log").read_bytes()
    assert log.startswith(first)  # the interrupted process's output, then the resumed one's
    assert log.count(b"crash_service: serving the receipt handler") == 2
    assert b"interrupted here and resumed" in log
    assert verify(bundle).ok
