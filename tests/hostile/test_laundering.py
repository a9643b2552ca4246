"""Evidence attacks (docs/hostile-input.md): evidence cannot be laundered through resume, pull,
a forged journal row, a forged lease or a bundle's odd entries.

Each is refused with exit 7 naming the file or entry (the janitor, which is not a verifier,
touches nothing it cannot prove and says so).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import signal
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

from acklab.evidence.bundle import atomic_write, dump_json, file_table
from acklab.evidence.journal import Journal, journal_path
from tests.doubles.gitlab.fixtures import gitlab_double  # noqa: F401 - a fixture, used by name
from tests.evidence.factories import journal_checkpoints, write_run_bundle
from tests.hostile.test_janitor_forged import forge, janitor
from tests.hostile.test_pull import bundle_files, env, pipeline_with  # noqa: F401 - env is a fixture

ACKLAB = [sys.executable, "-c", "import sys; from acklab.cli import main; main(sys.argv[1:])"]
# What `evidence pull` writes into a manifest, as a forger writes it.
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


@pytest.fixture
def recorded(tmp_path: Path) -> Path:
    """An evidence directory with a journal and one finalised bundle whose verdict is fail."""
    out = tmp_path / "out"
    with Journal(journal_path(out)) as journal:
        journal.record(run_id="r1", kind="run", name="fixture:live", status="started")
    journal_checkpoints(write_run_bundle(out / "r1", "r1", {"lost-ack": [(0, "fail")]}))
    return out


def killed_run(tmp_path: Path, *, trials: int) -> tuple[Path, Path, list[str]]:
    """A run of `trials` lost-ack trials killed (SIGKILL) after two finished: its evidence
    directory, its bundle, and the command that resumes it."""
    from tests.harness.test_resume import wait_for_trials

    out = tmp_path / "out"
    db = ("--db", f"sqlite:///{tmp_path / 'shop.db'}")  # a store the resumed run reads again
    argv = [*ACKLAB, "run", *db, "--target", "fixture:live", "--experiment", "lost-ack"]
    seeded = ("--trials", str(trials), "--seed", "7", "--out", str(out))
    process = subprocess.Popen([*argv, *seeded], stderr=subprocess.PIPE)
    bundle = wait_for_trials(process, out, 2)
    os.kill(process.pid, signal.SIGKILL)
    process.communicate(timeout=30)
    resume = [*ACKLAB, "run", *db, "--target", "fixture:live", "--resume", bundle.name, "--out", str(out)]
    return out, bundle, resume


def forge_pass(bundle: Path, **manifest_fields: Any) -> dict[str, Any]:
    """Flip the run to pass and recompute the manifest over it, as a forger who knows the format."""
    run = json.loads((bundle / "run.json").read_text())
    run["verdict"] = "pass"
    (bundle / "run.json").write_text(json.dumps(run))
    manifest = json.loads((bundle / "manifest.json").read_text())
    manifest["files"] = file_table(bundle)
    manifest.update(manifest_fields)
    atomic_write(bundle / "manifest.json", dump_json(manifest))
    return manifest


@pytest.mark.slow
def test_a_kept_trial_edited_before_resume_is_refused_and_verify_names_it(tmp_path):
    """Attack 12: kill -9 a run, edit a kept trial file to pass, resume."""
    out, bundle, resume = killed_run(tmp_path, trials=8)
    kept = sorted((bundle / "trials").glob("*.json"))[0]
    original = kept.read_bytes()
    trial = json.loads(original)
    trial["duration_ms"] += 1  # any edit: the file is no longer the one the trial wrote
    kept.write_text(json.dumps(trial))
    refused = subprocess.run(resume, capture_output=True, text=True, timeout=120, check=False)
    assert refused.returncode == 7, refused.stderr[-2000:]
    assert f"trials/{kept.name} is not the trial file the journal recorded" in refused.stderr
    kept.write_bytes(original)  # put back: the resume goes on
    done = subprocess.run(resume, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    verify = [*ACKLAB, "evidence", "verify", str(out), "--journal"]
    intact = subprocess.run(verify, capture_output=True, text=True, timeout=60, check=False)
    assert intact.returncode == 0, intact.stdout
    # After the end, the same edit with the manifest recomputed: the journal names the trial.
    kept.write_text(json.dumps(trial))
    manifest = json.loads((bundle / "manifest.json").read_text())
    manifest["files"] = file_table(bundle)
    atomic_write(bundle / "manifest.json", dump_json(manifest))
    forged = subprocess.run(verify, capture_output=True, text=True, timeout=60, check=False)
    assert forged.returncode == 7, forged.stdout
    assert f"trials/{kept.name} (sha256 " in forged.stdout
    assert "is not the trial file the journal recorded when the trial finished" in forged.stdout


def test_an_unsigned_pulled_from_does_not_switch_the_journal_off(recorded, acklab):
    """Attack 13: `pulled_from` written into a forged bundle's manifest."""
    forge_pass(recorded / "r1", pulled_from=PULLED_FROM)
    code, out, _ = acklab("evidence", "verify", recorded, "--journal")
    assert code == 7, out
    assert "r1: NOT INTACT" in out
    assert "has no record of `acklab evidence pull` storing bundle 'r1'" in out


def test_a_second_finalisation_appended_to_the_journal_is_refused(recorded, acklab):
    """Attack 14: a chained `bundle/finalised` row appended to vouch for a forged manifest."""
    code, out, _ = acklab("evidence", "verify", recorded, "--journal")
    assert code == 0, out
    with Journal(journal_path(recorded)) as journal:
        head = journal.head()
        assert head is not None
        manifest = forge_pass(recorded / "r1", journal_head={"entry": head[0], "sha256": head[1]})
        journal.record(
            run_id="r1",
            kind="bundle",
            name="r1",
            status="finalised",
            payload={"manifest_sha256": hashlib.sha256(dump_json(manifest)).hexdigest(), "bundle": "r1"},
        )
    code, out, _ = acklab("evidence", "verify", recorded, "--journal")
    assert code == 7, out
    assert "records bundle 'r1' finalised 2 times" in out
    assert "a second finalisation is refused" in out
    # The journal_head of the original, kept: the finalisation that follows it is the original's.
    with Journal(journal_path(recorded), readonly=True) as journal:
        [(first, _, _), *_] = [e for e in journal.bundle_entries("r1") if e[1] == "finalised"]
    forge_pass(recorded / "r1", journal_head={"entry": first - 1, "sha256": "x" * 64})
    code, out, _ = acklab("evidence", "verify", recorded, "--journal")
    assert code == 7
    assert "is not the manifest the journal recorded when the bundle was finalised" in out


def test_a_forged_worktree_lease_leaves_another_repositorys_worktree_list_alone(tmp_path, acklab):
    """Attack 15: a lease naming another repository's (stale) worktree."""
    repo, stale = tmp_path / "theirs", tmp_path / "their-worktree"
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run([*git, "init", "-q", str(repo)], check=True)
    subprocess.run([*git, "-C", str(repo), "commit", "-q", "--allow-empty", "-m", "x"], check=True)
    subprocess.run([*git, "-C", str(repo), "worktree", "add", "-q", str(stale)], check=True)
    subprocess.run(["rm", "-rf", str(stale)], check=True)  # theirs: missing, not yet pruned
    forge(tmp_path, "worktree", {"path": str(stale), "tmp": str(tmp_path / "gone"), "repo": str(repo)})
    present = tmp_path / "acklab-present"
    (present / "checkout").mkdir(parents=True)
    forge(tmp_path, "worktree", {"path": str(present / "checkout"), "tmp": str(present), "repo": str(repo)})
    code, err = janitor(acklab, tmp_path)
    assert code == 4, err
    assert f"refused to touch worktree {present / 'checkout'}" in err
    assert f"{repo}'s worktree list is left alone" in err
    listed = subprocess.run(
        ["git", "-C", str(repo), "worktree", "list", "--porcelain"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert f"worktree {stale}\n" in listed.stdout  # their entry: not pruned
    assert (present / "checkout").is_dir()


def test_a_fifo_or_a_temporary_file_in_a_bundle_is_exit_7_and_pages_does_not_publish_it(recorded, acklab):
    """Attack 16: entries that are not regular files, and leftovers, inside a finalised bundle."""
    bundle = recorded / "r1"
    os.mkfifo(bundle / "trials" / "pipe")
    (bundle / "incidents" / ".lost-ack.json.abc.tmp").write_text('{"verdict": "pass"}')
    code, out, _ = acklab("evidence", "verify", recorded)
    assert code == 7, out
    assert "unexpected: trials/pipe (not a regular file or directory" in out
    assert "unexpected: incidents/.lost-ack.json.abc.tmp (a temporary file" in out
    (bundle / "trials" / "pipe").unlink()
    from acklab.console.export import build_snapshot

    build_snapshot(recorded, recorded.parent / "public", env={})
    published = [p.name for p in (recorded.parent / "public").rglob("*")]
    assert "run.json" in published
    assert not [name for name in published if name.endswith(".tmp")]


def _zip(members: list[tuple[str, bytes]]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        for name, data in members:
            zf.writestr(name, data)
    return buffer.getvalue()


@pytest.mark.parametrize(
    ("hostile", "member"),
    [([("out/r1", b"a file where a folder is")], "out/r1"), ([("out/./r1/x", b"")], "out/./r1/x")],
    ids=["file-folder-clash", "dot-member"],
)
def test_a_hostile_archive_layout_is_exit_7_naming_the_member(tmp_path, env, acklab, hostile, member):  # noqa: F811
    files = list(bundle_files(tmp_path, "r1", prefix="out").items())
    pipeline = pipeline_with(env, _zip(files + hostile))
    out = tmp_path / "pulled"
    code, _, err = acklab("evidence", "pull", "--project", "acme/shop", "--pipeline", pipeline, "--out", out)
    assert code == 7, err
    assert f"archive member {member!r}" in err
    assert not list(out.glob("pipeline-*"))
