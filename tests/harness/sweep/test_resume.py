"""Resume: a sweep killed with -9 (or stopped with SIGTERM) finishes with ``--resume SWEEP_ID`` and
repeats no finished trial; a password given with --db is asked for again, never read back."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from acklab.evidence.bundle import verify
from acklab.evidence.journal import Journal, journal_path
from acklab.evidence.validate import validate
from tests.harness.sweep.conftest import (
    ACKLAB,
    PASSWORD,
    cell,
    every_byte_under,
    read,
    run_cli,
    with_password,
)

pytestmark = pytest.mark.slow
TRIALS = 12
TARGETS = ("fixture:live", "fixture:unsafe", "fixture:live@stripe")


def start(out: Path, *argv: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [*ACKLAB, "sweep", *argv, "--experiment", "lost-ack", "--seed", "3", "--out", str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def wait_for(process: subprocess.Popen[bytes], condition: Any, what: str, timeout_s: float = 90) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            found = condition()
        except (OSError, ValueError, KeyError):  # a file being replaced under us
            found = None
        if found:
            return found
        if process.poll() is not None:  # its reason now, not a timeout later
            _, stderr = process.communicate()
            raise AssertionError(
                f"the sweep exited {process.returncode} before {what}: {stderr.decode()[-2000:]}"
            )
        time.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


def second_run_midway(out: Path) -> tuple[Path, str] | None:
    """(sweep dir, second run id) once the first run is complete and the second has 3 trials."""
    for index in out.glob("sweep-*/sweep.json"):
        runs = read(index)["runs"]
        run_id = runs[1]["run_id"]
        if (
            runs[0]["status"] == "complete"
            and run_id
            and len(list((out / run_id / "trials").glob("*.json"))) >= 3
        ):
            return index.parent, run_id
    return None


def journaled(out: Path, run_ids: set[str]) -> set[tuple[str, str]]:
    """(run id, trial id) of every trial file the evidence directory's journal recorded."""
    with Journal(journal_path(out), readonly=True) as journal:
        return {(run_id, Path(rel).stem) for run_id in run_ids for rel in journal.checkpoints(run_id)}


def trials_under(out: Path) -> dict[tuple[str, str], tuple[str, str]]:
    """(run id, trial id) -> (started_at, sha256 of the file), wherever the run's bundle is."""
    found = {}
    for path in out.rglob("trials/*.json"):
        record = read(path)
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        found[(record["run_id"], record["trial_id"])] = (record["started_at"], digest)
    return found


def test_a_sweep_killed_with_sigkill_resumes_without_repeating_a_finished_trial(tmp_path):
    out = tmp_path / "out"
    targets = [arg for target in TARGETS for arg in ("--target", target)]
    process = start(out, *targets, "--trials", str(TRIALS))
    root, second = wait_for(process, lambda: second_run_midway(out), "the second run to be midway")
    os.kill(process.pid, signal.SIGKILL)
    process.communicate(timeout=30)

    on_disk = trials_under(out)
    assert TRIALS + 3 <= len(on_disk) < 2 * TRIALS
    # A trial is finished once the journal records its file. A file the kill caught between its
    # write and its journal row is rerun, and at most one trial can be in that window.
    recorded = journaled(out, {run_id for run_id, _ in on_disk})
    before = {key: value for key, value in on_disk.items() if key in recorded}
    assert len(on_disk) - len(before) <= 1
    interrupted = read(root / "sweep.json")
    validate("sweep", interrupted)
    assert interrupted["status"] == "interrupted"
    assert [r["status"] for r in interrupted["runs"]] == ["complete", "interrupted", "pending"]
    assert not (root / "manifest.json").exists()
    assert (root / interrupted["runs"][0]["run_id"] / "manifest.json").is_file()  # moved in, complete
    assert read(out / second / "run.json")["status"] == "interrupted"  # still where the runner works

    # What the killed sweep started is leased in the evidence directory's journal: the janitor finds it.
    janitor = run_cli("janitor", "--out", str(out), "--json")
    assert janitor.returncode == 0, janitor.stderr[-3000:]
    cleaned = json.loads(janitor.stdout)["cleaned"]
    assert {c["resource"] for c in cleaned} == {"directory"}
    assert all(c["run_id"] == second for c in cleaned)

    done = run_cli("sweep", "--resume", root.name, "--out", str(out), "--json")
    assert done.returncode == 1, done.stderr[-3000:]
    after = trials_under(out)
    # No finished trial was run again: each keeps its start. The complete run's are untouched;
    # the interrupted run's were judged against its process's temporary database, gone since:
    # the end-of-run re-read cannot read them, and says so (docs/concepts.md#the-late-re-read).
    assert {key: after[key][0] for key in before} == {key: start for key, (start, _) in before.items()}
    earlier = [key for key in before if key[0] == second]
    assert earlier
    assert {key: after[key] for key in before if key[0] != second} == {
        key: value for key, value in before.items() if key[0] != second
    }
    for run_id, trial_id in earlier:
        record = read(next(out.rglob(f"{run_id}/trials/{trial_id}.json")))
        assert "finished before the run was interrupted" in record["late_read"]["error"]
        assert record["verdict"] in ("error", "fail")  # fail: a violation proven when it ran
    assert len(after) == len(TARGETS) * TRIALS
    doc = read(root / "sweep.json")
    assert doc["status"] == "complete"
    assert [r["status"] for r in doc["runs"]] == ["complete"] * 3
    assert interrupted["runs"][1]["run_id"] == doc["runs"][1]["run_id"]  # resumed, not restarted
    assert not (out / second).exists()  # moved into the sweep once complete
    assert verify(root).ok
    unsafe = cell(doc["cells"], "fixture:unsafe", "sqlite", "lost-ack")
    assert (unsafe["verdict"], unsafe["trials"], unsafe["failed"]) == ("fail", TRIALS, TRIALS)
    # The interrupted run (fixture:unsafe) lost only passes it never had; the others are whole.
    assert cell(doc["cells"], "fixture:live@stripe", "sqlite", "lost-ack")["passed"] == TRIALS

    again = run_cli("sweep", "--resume", root.name, "--out", str(out))
    assert again.returncode == 3
    assert "complete" in again.stderr


@pytest.mark.postgres
def test_sigterm_exits_6_and_the_resume_needs_the_password_again(tmp_path, postgres_server, pg_url):
    out, db = tmp_path / "out", with_password(postgres_server, pg_url)
    process = start(out, "--target", "fixture:live", "--db", db, "--trials", "16")
    wait_for(process, lambda: any(out.glob("*/trials/*.json")), "a first finished trial")
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=60)
    message = stderr.decode()
    assert process.returncode == 6, message[-3000:]
    (root,) = [p.parent for p in out.glob("sweep-*/sweep.json")]
    assert f"--resume {root.name}" in message
    assert ":***@127.0.0.1:" in message
    assert PASSWORD not in message
    assert read(root / "sweep.json")["status"] == "interrupted"

    without = run_cli("sweep", "--resume", root.name, "--out", str(out))
    assert without.returncode == 3
    assert "pass that URL again with --db" in without.stderr

    done = run_cli("sweep", "--resume", root.name, "--out", str(out), "--db", db, "--json")
    assert done.returncode == 0, done.stderr[-3000:]
    doc = read(root / "sweep.json")
    live = cell(doc["cells"], "fixture:live", "postgresql@", "lost-ack")
    assert (live["verdict"], live["trials"], live["passed"]) == ("pass", 16, 16)
    assert [path for path, data in every_byte_under(out) if PASSWORD.encode() in data] == []
