"""Worktrees are leased: kill -9 of `acklab flow run` leaves nothing `acklab janitor` cannot remove."""

from __future__ import annotations

import json
import re
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from acklab.evidence.journal import Journal
from acklab.flows.worktree import head_sha, worktree
from acklab.harness.procs.janitor import open_leases, sweep
from acklab.harness.procs.lease_witness import MARKER
from acklab.harness.procs.leases import leasing
from tests.flows.conftest import fast_spec, run_git

REPRODUCING = re.compile(r"reproduce: .* on (\S+/checkout) \.\.\.")


def acklab_command() -> list[str]:
    found = shutil.which("acklab", path=str(Path(sys.executable).parent))
    assert found, "the acklab console script is installed beside this interpreter"
    return [found]


@pytest.mark.slow
def test_kill_9_of_a_flow_leaves_worktrees_the_janitor_removes(sandbox, tmp_path, acklab):
    out = tmp_path / "out"
    argv = [*acklab_command(), "flow", "run", str(fast_spec(tmp_path)), "--auto-approve", "--out", str(out)]
    with subprocess.Popen(
        argv, cwd=sandbox, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True
    ) as flow:
        assert flow.stderr is not None
        checkout = None
        for line in flow.stderr:  # the head's worktree exists once reproduce starts attacking it
            found = REPRODUCING.search(line)
            if found:
                checkout = Path(found.group(1))
                break
        assert checkout is not None, "the flow never reached reproduce"
        flow.send_signal(signal.SIGKILL)
        assert flow.wait(30) == -signal.SIGKILL
    assert checkout.is_dir()
    assert str(checkout) in run_git(sandbox, "worktree", "list", "--porcelain")

    code, stdout, _ = acklab(sandbox, "janitor", "--out", out, "--json")
    assert code == 0, stdout
    cleaned = json.loads(stdout)["cleaned"]
    [lease] = [c for c in cleaned if c["resource"] == "worktree"]
    assert lease["ok"]
    assert "removed worktree" in lease["outcome"]
    assert not checkout.parent.exists()
    assert run_git(sandbox, "worktree", "list", "--porcelain").count("worktree ") == 1
    with Journal(out / "journal.sqlite") as journal:
        assert open_leases(journal) == []


def test_the_janitor_leaves_a_worktree_whose_token_does_not_match(small_repo, tmp_path):
    out = tmp_path / "out"
    with leasing(out, "flow-test"), worktree(small_repo, head_sha(small_repo), label="head") as wt:
        (wt.path.parent / MARKER).write_text("someone else's token")
        with Journal(out / "journal.sqlite") as journal:
            [entry] = open_leases(journal)
            assert entry.payload["resource"] == "worktree"
            # as if its owner had died: a pid that ran and is gone
            gone = subprocess.run(
                [sys.executable, "-c", "import os; print(os.getpid())"],
                capture_output=True,
                text=True,
                check=True,
            )
            owner = {"pid": int(gone.stdout), "start_ticks": 1, "host": socket.gethostname()}
            journal.record(
                run_id="flow-test", kind="lease", name=entry.name + "-orphan", status="acquired",
                started_at=entry.started_at, payload={**entry.payload, "owner": owner},
            )  # fmt: skip
            results = {c.lease: c for c in sweep(journal)}
        orphan = results[entry.name + "-orphan"]
        assert not orphan.ok
        assert "refused to touch worktree" in orphan.outcome
        assert "the lease's token" in orphan.outcome
        assert results[entry.name].in_use  # the live lease of this very process is left alone
        assert wt.path.is_dir()
    assert not wt.path.exists()  # its owner removed it on the way out
