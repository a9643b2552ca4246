"""A symlinked handler, or a symlinked folder above it, at the expected head: refused before proposing."""

from __future__ import annotations

import os

import pytest

from acklab.flows.diffs import make_diff
from acklab.flows.guard import check, head_path_problem
from acklab.flows.spec import load_spec
from acklab.flows.worktree import head_sha, repo_snapshot
from tests.flows.conftest import LIVE, UNSAFE, fast_spec, load_trail, run_git, write_decisions


def _commit_symlinked_file(repo):
    (repo / "app" / "real_webhooks.py").write_text(UNSAFE)
    (repo / "app" / "webhooks.py").unlink()
    os.symlink("real_webhooks.py", repo / "app" / "webhooks.py")
    run_git(repo, "add", "--all")
    run_git(repo, "commit", "--quiet", "-m", "the handler is a link")


def _commit_symlinked_folder(repo):
    run_git(repo, "mv", "app", "real_app")
    os.symlink("real_app", repo / "app")
    run_git(repo, "add", "--all")
    run_git(repo, "commit", "--quiet", "-m", "the app folder is a link")


LINKS = {"the file": _commit_symlinked_file, "a folder above it": _commit_symlinked_folder}


@pytest.mark.parametrize("link", LINKS)
def test_the_flow_refuses_before_proposing(link, sandbox, tmp_path, acklab):
    LINKS[link](sandbox)
    before = repo_snapshot(sandbox)
    decisions = write_decisions(tmp_path, [{"gate": "approve", "decision": "approve", "actor": "bob"}])
    code, stdout, _ = acklab(
        sandbox, "flow", "run", fast_spec(tmp_path), "--local", "--decisions", decisions,
        "--out", tmp_path / "out", "--json",
    )  # fmt: skip
    assert code == 5
    trail = load_trail(stdout)
    assert trail["outcome"] == "refused"
    assert "refused before proposing" in trail["outcome_detail"]
    assert "is a symlink" in trail["outcome_detail"]
    assert trail["checkpoints"] == []  # nothing reproduced, nothing proposed
    assert repo_snapshot(sandbox) == before


@pytest.mark.parametrize("link", LINKS)
def test_the_guard_reads_modes_from_the_repository_not_from_the_diff(link, small_repo, tmp_path):
    LINKS[link](small_repo)
    head = head_sha(small_repo)
    assert "is a symlink" in str(head_path_problem(small_repo, head, "app/webhooks.py"))
    # an ordinary-looking diff (mode 100644 in its headers, if any) changes nothing about that
    verdict = check(
        make_diff("app/webhooks.py", UNSAFE, LIVE),
        spec=load_spec(fast_spec(tmp_path)),
        repo=small_repo,
        commit=head,
    )
    assert not verdict.allowed
    assert any("is a symlink" in r for r in verdict.reasons)


def test_a_regular_file_below_plain_folders_is_fine(small_repo):
    assert head_path_problem(small_repo, head_sha(small_repo), "app/webhooks.py") is None
    assert "does not exist" in str(head_path_problem(small_repo, head_sha(small_repo), "app/missing.py"))
