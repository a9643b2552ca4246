"""Evidence laundered by rows appended to the journal: each is refused with exit 7.

The journal is append-only and hash-chained, so anyone who can write the evidence directory can
still append a valid row. One appended row must never vouch for a rewritten bundle or trial:

* a ``bundle/pulled`` row beside a ``pulled_from`` written into a bundle this journal saw run
  and finalise (a local bundle is verified against its own journal, never as a pulled one);
* a ``bundle/pulled`` row outside a pull run of its own (``evidence pull`` records one: its
  start, the bundles it stored, its end naming them);
* a second ``checkpoint`` row for a trial file (the first ``ok`` is the one that counts; a
  ``rewritten`` one only makes ``--resume`` run the trial again).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

from acklab.evidence.bundle import atomic_write, dump_json, file_table, sha256_file
from acklab.evidence.journal import Journal, journal_path
from tests.evidence.factories import write_run_bundle
from tests.hostile.test_laundering import ACKLAB, forge_pass, recorded  # noqa: F401 - a fixture

PULLED_FROM = {
    "gitlab_url": "https://gitlab.example",
    "project": "acme/shop",
    "pipeline": "1",
    "job": "run",
    "job_id": "2",
    "pulled_at": "2026-01-01T00:00:00.000000Z",
    "verified": True,
    "original_manifest_sha256": "0" * 64,
}


def append_pulled(out: Path, bundle: Path, **payload: Any) -> None:
    """One chained ``bundle/pulled`` row for `bundle`'s manifest, as `evidence pull` writes its rows."""
    sha = hashlib.sha256((bundle / "manifest.json").read_bytes()).hexdigest()
    with Journal(journal_path(out)) as journal:
        journal.record(
            run_id=bundle.name,
            kind="bundle",
            name=bundle.name,
            status="pulled",
            ended_at=PULLED_FROM["pulled_at"],
            payload={"manifest_sha256": sha, "path": bundle.relative_to(out).as_posix(), "pipeline": "1",
                     "job_id": 2, **payload},
        )  # fmt: skip


def test_a_local_bundle_rewritten_and_marked_pulled_is_refused(recorded, acklab):  # noqa: F811
    forge_pass(recorded / "r1", pulled_from=PULLED_FROM)
    append_pulled(recorded, recorded / "r1")
    code, out, _ = acklab("evidence", "verify", recorded, "--journal")
    assert code == 7, out
    assert "r1: NOT INTACT" in out
    assert "saw bundle 'r1' run or finalised here" in out


def test_one_pulled_row_outside_a_pull_run_vouches_for_nothing(tmp_path, acklab):
    # A bundle this journal never saw, planted where a pull would store it, with one row for it.
    out = tmp_path / "out"
    with Journal(journal_path(out)) as journal:
        journal.record(run_id="r0", kind="run", name="fixture:live", status="started")
    forged = write_run_bundle(tmp_path / "elsewhere" / "r2", "r2", {"lost-ack": [(0, "pass")]})
    planted = out / "pipeline-1" / "run-2" / "r2"
    shutil.copytree(forged, planted)
    manifest = json.loads((planted / "manifest.json").read_text())
    manifest.update(pulled_from=PULLED_FROM, files=file_table(planted))
    atomic_write(planted / "manifest.json", dump_json(manifest))
    append_pulled(out, planted)
    code, said, _ = acklab("evidence", "verify", out, "--journal")
    assert code == 7, said
    assert "has no record of `acklab evidence pull` storing bundle 'r2'" in said


def _killed_run(tmp_path: Path) -> tuple[Path, Path, list[str]]:
    """A run killed (SIGKILL) after two finished trials: its evidence directory, its bundle, and
    the command that resumes it."""
    from tests.harness.test_resume import wait_for_trials

    out = tmp_path / "out"
    db = ("--db", f"sqlite:///{tmp_path / 'shop.db'}")  # a store the resumed run reads again
    argv = [*ACKLAB, "run", *db, "--target", "fixture:live", "--experiment", "lost-ack", "--trials", "6"]
    process = subprocess.Popen([*argv, "--seed", "7", "--out", str(out)], stderr=subprocess.PIPE)
    bundle = wait_for_trials(out, 2)
    os.kill(process.pid, signal.SIGKILL)
    process.communicate(timeout=30)
    resume = [*ACKLAB, "run", *db, "--target", "fixture:live", "--resume", bundle.name, "--out", str(out)]
    return out, bundle, resume


def _edit_and_vouch(out: Path, bundle: Path, status: str) -> tuple[Path, dict[str, Any]]:
    """Edit the first kept trial and append one ``checkpoint`` row (`status`) with its new
    sha256; the trial as it was before the edit."""
    kept = sorted((bundle / "trials").glob("*.json"))[0]
    original = json.loads(kept.read_text())
    kept.write_text(json.dumps({**original, "duration_ms": original["duration_ms"] + 1000}))
    with Journal(journal_path(out)) as journal:
        journal.record(run_id=bundle.name, kind="checkpoint", name=kept.stem, status=status,
                       payload={"file": f"trials/{kept.name}", "sha256": sha256_file(kept),
                                "verdict": original["verdict"]})  # fmt: skip
    return kept, original


@pytest.mark.slow
def test_an_appended_checkpoint_does_not_make_resume_accept_an_edited_trial(tmp_path):
    out, bundle, resume = _killed_run(tmp_path)
    kept, _ = _edit_and_vouch(out, bundle, "ok")
    refused = subprocess.run(resume, capture_output=True, text=True, timeout=120, check=False)
    assert refused.returncode == 7, refused.stderr[-2000:]
    assert f"trials/{kept.name} is not the trial file the journal recorded" in refused.stderr


@pytest.mark.slow
def test_an_appended_rewrite_only_makes_resume_run_the_trial_again(tmp_path):
    out, bundle, resume = _killed_run(tmp_path)
    kept, original = _edit_and_vouch(out, bundle, "rewritten")
    done = subprocess.run(resume, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    again = json.loads(kept.read_text())
    assert again["trial_id"] == original["trial_id"]
    assert again["started_at"] > original["started_at"]  # run again by the resumed run: the edit is gone
    verify = [*ACKLAB, "evidence", "verify", str(out), "--journal"]
    intact = subprocess.run(verify, capture_output=True, text=True, timeout=60, check=False)
    assert intact.returncode == 0, intact.stdout
