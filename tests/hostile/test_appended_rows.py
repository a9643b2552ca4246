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
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from acklab.evidence.bundle import atomic_write, dump_json, file_table, sha256_file
from acklab.evidence.journal import Journal, journal_path
from tests.evidence.factories import write_run_bundle
from tests.hostile.test_laundering import (  # noqa: F401 - recorded is a fixture
    ACKLAB,
    PULLED_FROM,
    forge_pass,
    killed_run,
    recorded,
)


def append_pulled(out: Path, bundle: Path) -> None:
    """One chained ``bundle/pulled`` row for `bundle`'s manifest, as `evidence pull` writes its rows."""
    vouch = {
        "manifest_sha256": hashlib.sha256((bundle / "manifest.json").read_bytes()).hexdigest(),
        "path": bundle.relative_to(out).as_posix(),
        "pipeline": PULLED_FROM["pipeline"],
        "job_id": 2,
    }
    with Journal(journal_path(out)) as journal:
        journal.record(run_id=bundle.name, kind="bundle", name=bundle.name, status="pulled", payload=vouch)


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


def _resumed_after_an_edit(tmp_path: Path, status: str) -> tuple[Path, dict[str, Any], Any]:
    """A killed run whose first kept trial was edited, with one ``checkpoint`` row (`status`)
    appended for the edited file, then resumed: the trial file, the trial as it was before the
    edit, and the resume's completed process."""
    out, bundle, resume = killed_run(tmp_path, trials=6)
    kept = sorted((bundle / "trials").glob("*.json"))[0]
    original = json.loads(kept.read_text())
    kept.write_text(json.dumps({**original, "duration_ms": original["duration_ms"] + 1000}))
    with Journal(journal_path(out)) as journal:
        journal.record(run_id=bundle.name, kind="checkpoint", name=kept.stem, status=status,
                       payload={"file": f"trials/{kept.name}", "sha256": sha256_file(kept),
                                "verdict": original["verdict"]})  # fmt: skip
    return kept, original, subprocess.run(resume, capture_output=True, text=True, timeout=300, check=False)


@pytest.mark.slow
def test_an_appended_checkpoint_does_not_make_resume_accept_an_edited_trial(tmp_path):
    kept, _, refused = _resumed_after_an_edit(tmp_path, "ok")
    assert refused.returncode == 7, refused.stderr[-2000:]
    assert f"trials/{kept.name} is not the trial file the journal recorded" in refused.stderr


@pytest.mark.slow
def test_an_appended_rewrite_only_makes_resume_run_the_trial_again(tmp_path):
    kept, original, done = _resumed_after_an_edit(tmp_path, "rewritten")
    assert done.returncode == 0, done.stderr[-2000:]
    again = json.loads(kept.read_text())
    assert again["trial_id"] == original["trial_id"]
    assert again["started_at"] > original["started_at"]  # run again by the resumed run: the edit is gone
    verify = [*ACKLAB, "evidence", "verify", str(tmp_path / "out"), "--journal"]
    intact = subprocess.run(verify, capture_output=True, text=True, timeout=60, check=False)
    assert intact.returncode == 0, intact.stdout
