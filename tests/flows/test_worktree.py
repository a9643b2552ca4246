"""Worktrees are isolated and always removed; a process started in one imports its code."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from acklab.flows.errors import FlowError
from acklab.flows.worktree import head_sha, repo_snapshot, worktree
from tests.flows.conftest import ROOT, make_repo


def test_a_worktree_goes_away_even_when_the_body_fails(small_repo):
    before = repo_snapshot(small_repo)
    seen = []

    def use_and_fail():
        with worktree(small_repo, head_sha(small_repo)) as wt:
            seen.append(wt.path)
            (wt.path / "app/webhooks.py").write_text("broken\n")
            assert wt.changed_files() == ["app/webhooks.py"]
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        use_and_fail()
    assert not seen[0].exists()
    assert repo_snapshot(small_repo) == before


def test_a_bad_commit_is_a_flow_error(small_repo):
    with pytest.raises(FlowError, match="git worktree add"), worktree(small_repo, "0" * 40):
        pass


def test_the_patched_module_is_the_one_a_check_imports(tmp_path):
    """Verify's checks (pytest...) test the worktree's app.webhooks, not the installed one."""
    copy = tmp_path / "project"
    for folder in ("acklab", "app", "harness"):  # a checkout's shape: acklab/ beside its packages
        shutil.copytree(ROOT / folder, copy / folder, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(ROOT / "pyproject.toml", copy / "pyproject.toml")
    (copy / "app" / "webhooks.py").write_text(
        (ROOT / "app" / "unsafe.py").read_text() + "MARKER = 'patched'\n"
    )
    repo = make_repo(copy, {})
    with worktree(repo, head_sha(repo)) as wt:
        done = subprocess.run(
            [sys.executable, "-c", "import acklab.app.webhooks as m; print(m.__file__, m.MARKER)"],
            cwd=tmp_path,  # not the worktree: PYTHONPATH alone must be enough
            env={**os.environ, "PYTHONPATH": str(wt.path), "PYTHONDONTWRITEBYTECODE": "1"},
            capture_output=True,
            text=True,
            check=True,
        )
        assert done.stdout.split() == [str(wt.path / "app" / "webhooks.py"), "patched"]
    # without the worktree on PYTHONPATH, the installed (editable) project wins
    done = subprocess.run(
        [sys.executable, "-c", "import acklab.app.webhooks as m; print(m.__file__)"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.strip() == str(ROOT / "app" / "webhooks.py")
