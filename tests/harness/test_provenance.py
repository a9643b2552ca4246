"""Incidents name the handler's commit: CI_COMMIT_SHA, else git HEAD of its checkout, else null."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from acklab.evidence.validate import validate
from acklab.harness.engine.runner import RunOptions, run
from acklab.harness.targets import provenance, resolve_target
from acklab.harness.targets.checkout import CHECKOUT_MARKERS, checkout_target
from acklab.harness.targets.provenance import Revision, revision_of
from tests.harness.handlers import Receipt

CI_SHA = "0123456789abcdef0123456789abcdef01234567"
GIT = shutil.which("git")  # installed by scripts/ensure-system-deps.sh (make test)


def git(repo: Path, *args: str) -> str:
    assert GIT is not None, "git is not installed: run make test (scripts/ensure-system-deps.sh installs it)"
    done = subprocess.run(
        [GIT, "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.org", *args],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A git repository with one commit."""
    root = tmp_path / "service"
    root.mkdir()
    git(root, "init", "-q")
    (root / "handler.py").write_text("print('ok')\n")
    git(root, "add", "handler.py")
    git(root, "commit", "-q", "-m", "handler")
    return root


def test_head_of_the_checkout_and_whether_it_is_dirty(repo):
    head = git(repo, "rev-parse", "HEAD")
    assert revision_of(repo, env={}) == Revision(head, dirty=False)
    (repo / "sub").mkdir()
    assert revision_of(repo / "sub", env={}) == Revision(head, dirty=False)  # any folder of it
    (repo / "handler.py").write_text("print('patched')\n")
    patched = revision_of(repo, env={})
    assert (patched.commit_sha, patched.dirty) == (head, True)
    diff = subprocess.run(
        ["git", "-C", str(repo), "diff", "HEAD", "--binary"], capture_output=True, check=True
    )
    assert patched.changes == hashlib.sha256(diff.stdout).hexdigest()
    assert patched.describe() == {"commit_sha": head, "dirty": True, "changes": patched.changes}
    assert patched.label == f"{head[:8]}+{patched.changes[:6]}"


def test_untracked_files_never_make_a_checkout_dirty(repo):
    """`pip install -e .` leaves *.egg-info, a run its evidence: neither is code the commit names."""
    head = git(repo, "rev-parse", "HEAD")
    (repo / "shop.egg-info").mkdir()
    (repo / "shop.egg-info" / "PKG-INFO").write_text("Name: shop\n")
    (repo / "notes.txt").write_text("scratch\n")
    assert revision_of(repo, env={}) == Revision(head, dirty=False)
    assert revision_of(repo, env={}).label == head[:8]


def test_two_different_dirty_trees_never_share_a_label(repo):
    (repo / "handler.py").write_text("print('fix one')\n")
    one = revision_of(repo, env={})
    (repo / "handler.py").write_text("print('fix two')\n")
    two = revision_of(repo, env={})
    git(repo, "add", "handler.py")  # staged changes count the same as unstaged ones
    staged = revision_of(repo, env={})
    assert one.dirty
    assert two.dirty
    assert one.label != two.label
    assert staged.label == two.label


def test_ci_commit_sha_wins_and_garbage_is_ignored(tmp_path):
    assert revision_of(tmp_path, env={"CI_COMMIT_SHA": CI_SHA}).commit_sha == CI_SHA
    assert revision_of(None, env={"CI_COMMIT_SHA": CI_SHA.upper()}).commit_sha == CI_SHA
    assert revision_of(tmp_path, env={"CI_COMMIT_SHA": "main; rm -rf /"}).commit_sha is None


def test_outside_a_repository_or_without_git_nothing_is_known(tmp_path, monkeypatch):
    assert revision_of(tmp_path, env={}) == Revision(None, None)
    assert revision_of(tmp_path / "gone", env={}) == Revision(None, None)
    monkeypatch.setattr(shutil, "which", lambda _: None)  # provenance finds git through it
    assert revision_of(Path.cwd(), env={"CI_COMMIT_SHA": CI_SHA}) == Revision(CI_SHA, None)
    assert Revision().describe() == {"commit_sha": None}


def test_the_fixture_names_the_checkout_its_app_package_comes_from(monkeypatch):
    monkeypatch.delenv("CI_COMMIT_SHA", raising=False)
    target = resolve_target("fixture:live")
    source = target.source_dir()
    assert source is not None
    assert (source / "webhooks.py").is_file()
    assert GIT is not None, "git is not installed: run make test (scripts/ensure-system-deps.sh installs it)"
    head = subprocess.run(
        [GIT, "-C", str(source), "rev-parse", "HEAD"], capture_output=True, text=True, check=False
    )
    expected = head.stdout.strip() if head.returncode == 0 else None  # a checkout, or an sdist
    assert target.describe().commit_sha == expected


def test_the_fixture_names_its_handler_by_the_content_hash_of_the_module_that_runs():
    """A verdict's identity: the sandbox of the repair story holds the unsafe handler under the
    live name, at another commit; the module's own hash tells them apart."""
    hashes = {}
    for handler, module in (("live", "webhooks.py"), ("unsafe", "unsafe.py")):
        target = resolve_target(f"fixture:{handler}")
        source = target.source_dir()
        assert source is not None
        hashes[handler] = target.describe().handler_sha256
        assert hashes[handler] == hashlib.sha256((source / module).read_bytes()).hexdigest()
        assert target.revision.handler_sha256 == hashes[handler]
    assert hashes["live"] != hashes["unsafe"]
    assert Revision("a" * 40, False, "b" * 64).describe() == {
        "commit_sha": "a" * 40,
        "dirty": False,
        "handler_sha256": "b" * 64,
    }


def test_a_checkouts_fixture_is_named_by_the_handler_in_that_checkout(tmp_path):
    """The repair story's sandbox: its live handler is the unsafe one; the lab never imports
    it, but names it by its bytes, read without following a link."""
    own = resolve_target("fixture:unsafe").source_dir()
    assert own is not None
    for marker in CHECKOUT_MARKERS:
        (tmp_path / marker).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / marker).write_text("")
    shutil.copyfile(own / "unsafe.py", tmp_path / "app" / "webhooks.py")
    target = checkout_target("fixture:live", tmp_path, db_url=None)
    assert target.name == "fixture:live"
    assert target.describe().handler_sha256 == hashlib.sha256((own / "unsafe.py").read_bytes()).hexdigest()
    (tmp_path / "app" / "webhooks.py").unlink()
    (tmp_path / "app" / "webhooks.py").symlink_to("/dev/zero")
    assert checkout_target("fixture:live", tmp_path, db_url=None).describe().handler_sha256 is None
    assert provenance.file_sha256(own / "unsafe.py", max_bytes=10) is None  # bounded


@pytest.mark.slow
def test_a_spec_target_run_records_the_working_directorys_commit(serve_handler, repo, tmp_path, monkeypatch):
    monkeypatch.delenv("CI_COMMIT_SHA", raising=False)
    spec = serve_handler(Receipt(), name="receipt")
    monkeypatch.chdir(repo)
    out = repo / "out"  # inside the checkout, not ignored: the run must not see its own files
    result = run(RunOptions(target=str(spec), experiments=("lost-ack",), trials=1, out=out, journal=False))
    assert result.verdict == "pass", result.run
    incident = json.loads((result.bundle / result.run["experiments"][0]["incident"]).read_text())
    validate("incident", incident)
    assert incident["target"]["commit_sha"] == git(repo, "rev-parse", "HEAD")
    assert incident["target"]["dirty"] is False
    assert "handler_sha256" not in incident["target"]  # the lab cannot see a service's code


@pytest.mark.slow
def test_a_run_in_a_pipeline_records_ci_commit_sha(serve_handler, tmp_path, monkeypatch):
    monkeypatch.setenv("CI_COMMIT_SHA", CI_SHA)
    monkeypatch.chdir(tmp_path)
    spec = serve_handler(Receipt(), name="receipt")
    result = run(
        RunOptions(target=str(spec), experiments=("lost-ack",), trials=1, out=tmp_path / "out", journal=False)
    )
    incident = json.loads((result.bundle / result.run["experiments"][0]["incident"]).read_text())
    validate("incident", incident)
    assert incident["target"]["commit_sha"] == CI_SHA
