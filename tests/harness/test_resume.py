"""Checkpoint and resume: a run killed with -9 (or stopped with SIGTERM) resumes with
``--resume RUN_ID`` and repeats no finished trial."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from acklab.evidence.bundle import verify
from acklab.evidence.journal import Journal, journal_path

ACKLAB = [sys.executable, "-c", "import sys; from acklab.cli import main; main(sys.argv[1:])"]
TRIALS = 12


def start(out: Path, *db: str) -> subprocess.Popen[bytes]:
    args = [
        "run",
        *db,
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


def wait_for_trials(
    process: subprocess.Popen[bytes], out: Path, at_least: int, timeout_s: float = 60
) -> Path:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for bundle in out.glob("*/trials"):
            if len(list(bundle.glob("*.json"))) >= at_least:
                return bundle.parent
        if process.poll() is not None:  # its reason now, not a timeout later
            _, stderr = process.communicate()
            raise AssertionError(f"the run exited {process.returncode} first: {stderr.decode()[-2000:]}")
        time.sleep(0.02)
    raise AssertionError(f"no bundle under {out} reached {at_least} finished trials")


def snapshot(bundle: Path) -> dict[str, tuple[str, str]]:
    """trial id -> (started_at, sha256 of its file)."""
    found = {}
    for path in (bundle / "trials").glob("*.json"):
        record = json.loads(path.read_text())
        found[record["trial_id"]] = (record["started_at"], hashlib.sha256(path.read_bytes()).hexdigest())
    return found


def recorded(out: Path, bundle: Path) -> dict[str, tuple[str, str]]:
    """`snapshot` of the trials the journal recorded as finished: a process killed with -9 between
    writing a trial's file and recording it leaves a file that the resumed run runs again."""
    with Journal(journal_path(out), readonly=True) as journal:
        files = journal.checkpoints(bundle.name)
    return {tid: seen for tid, seen in snapshot(bundle).items() if f"trials/{tid}.json" in files}


def resume(out: Path, run_id: str, *db: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*ACKLAB, "run", *db, "--target", "fixture:live", "--resume", run_id, "--out", str(out), "--json"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def finish_and_check(
    out: Path, bundle: Path, before: dict[str, tuple[str, str]], *db: str
) -> subprocess.CompletedProcess[str]:
    done = resume(out, bundle.name, *db)
    result = json.loads(done.stdout)
    assert result["run_id"] == bundle.name
    assert result["experiments"][0]["trials"] == TRIALS
    after = snapshot(bundle)
    assert len(after) == TRIALS
    # No trial finished before the interruption is run again: each keeps its start (its file
    # gains the end-of-run re-read, as every trial's does).
    assert {tid: after[tid][0] for tid in before} == {tid: start for tid, (start, _) in before.items()}
    for path in (bundle / "trials").glob("*.json"):
        assert "late_read" in json.loads(path.read_text())
    run = json.loads((bundle / "run.json").read_text())
    assert run["status"] == "complete"
    assert verify(bundle).ok
    return done


def trial_file(bundle: Path, trial_id: str) -> dict[str, Any]:
    return json.loads((bundle / "trials" / f"{trial_id}.json").read_text())


@pytest.mark.slow
def test_a_run_killed_with_sigkill_resumes_and_rereads_the_earlier_trials_in_their_store(tmp_path):
    """A late effect of a trial finished before the interruption is found."""
    out, db = tmp_path / "out", ("--db", f"sqlite:///{tmp_path / 'shop.db'}")
    process = start(out, *db)
    # Trials run one after another, each recorded right after its file is written: with four
    # files, at least three are recorded whenever the kill lands.
    bundle = wait_for_trials(process, out, 4)
    os.kill(process.pid, signal.SIGKILL)
    process.communicate(timeout=30)
    before = recorded(out, bundle)
    assert 3 <= len(before) < TRIALS
    preliminary = json.loads((bundle / "run.json").read_text())
    assert preliminary["status"] == "interrupted"
    assert not (bundle / "manifest.json").exists()
    # The consumer's background work lands a second effect of an earlier trial's event, late.
    victim = sorted(before)[0]
    [event_id, *_] = trial_file(bundle, victim)["event_ids"]
    shop = sqlite3.connect(tmp_path / "shop.db")
    shop.execute(
        "INSERT INTO fulfillments (event_id, order_id, amount_cents, currency, created_at)"
        " SELECT event_id, order_id, amount_cents, currency, created_at FROM fulfillments"
        " WHERE event_id = ? LIMIT 1",
        (event_id,),
    )
    shop.commit()
    shop.close()
    done = finish_and_check(out, bundle, before, *db)
    assert done.returncode == 1, done.stderr[-2000:]
    record = trial_file(bundle, victim)
    assert record["verdict"] == "fail"
    assert record["late_read"]["grew"] == [event_id]
    assert {trial_file(bundle, t)["verdict"] for t in after_ids(bundle) if t != victim} == {"pass"}


def after_ids(bundle: Path) -> list[str]:
    return sorted(p.stem for p in (bundle / "trials").glob("*.json"))


@pytest.mark.slow
def test_sigterm_exits_6_and_a_resume_without_the_earlier_store_marks_those_trials_error(tmp_path):
    out = tmp_path / "out"
    process = start(out)
    bundle = wait_for_trials(process, out, 2)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 6, stderr.decode()[-2000:]
    assert f"--resume {bundle.name}" in stderr.decode()
    before = snapshot(bundle)
    assert json.loads((bundle / "run.json").read_text())["status"] == "interrupted"
    # The fixture's SQLite database was a temporary file of the interrupted process.
    done = finish_and_check(out, bundle, before)
    assert done.returncode == 4, done.stderr[-2000:]
    for trial_id in after_ids(bundle):
        record = trial_file(bundle, trial_id)
        if trial_id in before:
            assert record["verdict"] == "error"
            assert "finished before the run was interrupted" in record["late_read"]["error"]
        else:
            assert record["verdict"] == "pass", record["error"]


def test_resuming_an_unknown_run_is_invalid_input(tmp_path):
    done = resume(tmp_path / "out", "no-such-run")
    assert done.returncode == 3
    assert "no-such-run" in done.stderr


@pytest.mark.slow
def test_an_interrupted_runs_service_log_is_kept_and_the_resumed_one_follows_it(tmp_path):
    """A spec service stops with the interrupted process; its output must not stop with it."""
    from acklab.harness.ports import free_port
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
    bundle = wait_for_trials(process, out, 2)
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
