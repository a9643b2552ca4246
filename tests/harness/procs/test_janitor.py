"""Leases and the janitor: kill the lab mid-run, then clean what it left behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from acklab.cli import main
from acklab.evidence.journal import Journal, journal_path
from acklab.harness.procs.fixture_process import LAUNCHER
from acklab.harness.procs.janitor import open_leases, sweep
from acklab.harness.procs.leases import LeaseBook, same_process_alive, start_ticks


def janitor(capsys, out: Path) -> tuple[int, dict]:
    with pytest.raises(SystemExit) as exited:
        main(["janitor", "--out", str(out), "--json"])
    return int(exited.value.code or 0), json.loads(capsys.readouterr().out)


def wait_for(predicate, timeout_s: float = 60.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = predicate()
        if found:
            return found
        time.sleep(0.1)
    raise AssertionError("timed out")


@pytest.mark.slow
def test_the_janitor_cleans_what_a_killed_lab_left_behind(tmp_path, capsys):
    out = tmp_path / "out"
    argv = ["run", "--target", "fixture:live", "--experiment", "crash-after-commit", "--trials", "50"]
    lab = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER, *argv, "--out", str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:

        def running_fixture() -> list:
            if not journal_path(out).exists():
                return []
            with Journal(journal_path(out)) as journal:
                leases = open_leases(journal)
            alive = [
                e
                for e in leases
                if e.payload["resource"] == "process"
                and same_process_alive(e.payload["detail"]["pid"], e.payload["detail"]["start_ticks"])
            ]
            return alive if any(e.payload["resource"] == "directory" for e in leases) else []

        [fixture] = wait_for(running_fixture)
        os.kill(lab.pid, signal.SIGKILL)  # the lab dies mid-run, as kill -9 or a lost CI runner would
        lab.wait(10)
    finally:
        if lab.poll() is None:
            os.killpg(lab.pid, signal.SIGKILL)
            lab.wait(10)

    with Journal(journal_path(out)) as journal:
        left = {e.name: e for e in open_leases(journal)}
    directory = next(e for e in left.values() if e.payload["resource"] == "directory")
    assert Path(directory.payload["detail"]["path"]).exists()

    code, report = janitor(capsys, out)
    assert code == 0, report
    assert report["failed"] == 0
    assert {c["lease"] for c in report["cleaned"]} == set(left)
    detail = fixture.payload["detail"]
    assert not same_process_alive(detail["pid"], detail["start_ticks"])  # the orphaned fixture is gone
    assert not Path(directory.payload["detail"]["path"]).exists()  # and its temporary database
    with Journal(journal_path(out)) as journal:
        assert open_leases(journal) == []
        released = [
            e for e in journal.history(fixture.run_id) if e.kind == "lease" and e.status == "released"
        ]
        assert any(e.payload.get("by") == "janitor" for e in released)

    assert janitor(capsys, out) == (0, {"cleaned": [], "failed": 0})  # nothing left the second time


def test_a_lease_whose_lab_still_runs_is_left_alone(tmp_path):
    (tmp_path / "acklab-x").mkdir()
    with Journal(tmp_path / "journal.sqlite") as journal:
        LeaseBook(journal, "run-1").acquire("directory", "acklab-x", path=str(tmp_path / "acklab-x"))
        [cleanup] = sweep(journal)
        assert cleanup.in_use
        assert cleanup.ok
        assert len(open_leases(journal)) == 1


def test_a_reused_pid_is_never_killed(tmp_path):
    sleeper = subprocess.Popen(["sleep", "30"], start_new_session=True)
    ticks = start_ticks(sleeper.pid)
    assert ticks is not None
    try:
        with Journal(tmp_path / "journal.sqlite") as journal:
            journal.record(
                run_id="run-dead",
                kind="lease",
                name=f"process:{sleeper.pid}:1",
                status="acquired",
                payload={
                    "resource": "process",
                    # the lease names this pid, but a process that started at another time
                    "detail": {
                        "pid": sleeper.pid,
                        "pgid": sleeper.pid,
                        "start_ticks": ticks - 1,
                    },
                    "owner": {"pid": 2**22 + 7, "start_ticks": 1, "host": os.uname().nodename},
                },
            )
            [cleanup] = sweep(journal)
        assert cleanup.ok
        assert "already ended" in cleanup.outcome
        assert sleeper.poll() is None  # still running: it was never the lab's
    finally:
        sleeper.kill()
        sleeper.wait()
