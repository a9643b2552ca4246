"""Git plumbing for the flow: the repository's head, and isolated worktrees that always go away.

Every patch is applied, checked and attacked in a worktree of its own, checked out
(detached, so no branch is left behind) at the expected head in a temporary directory.
The caller's checkout, index and branches are never touched. The worktree itself is the
harness's (`harness.procs.worktrees.leased_worktree`, which `acklab run --baseline` uses too):
leased in the journal, removed on the way out, and removed by `acklab janitor` after a kill -9.
Here it is wrapped in the flow's view of a checkout (`Worktree`), and git's failures become
the flow's own (`FlowError`).
"""

from __future__ import annotations

import os
import subprocess  # nosec B404
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from acklab.harness.procs import worktrees
from acklab.harness.procs.worktrees import GitFailed, leased_worktree

from .errors import FlowError

# A fixed identity for commits the flow makes, used only when the repository has none.
FLOW_IDENTITY = {
    "GIT_AUTHOR_NAME": "acklab repair flow",
    "GIT_AUTHOR_EMAIL": "acklab@localhost",
    "GIT_COMMITTER_NAME": "acklab repair flow",
    "GIT_COMMITTER_EMAIL": "acklab@localhost",
}


def git(
    repo: Path,
    *args: str,
    input_text: str | None = None,
    check: bool = True,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """`harness.procs.worktrees.git`, failing as the flow's FlowError (naming the command and git's message)."""
    try:
        return worktrees.git(repo, *args, input_text=input_text, check=check, env=env)
    except GitFailed as exc:
        raise FlowError(str(exc)) from exc


def toplevel(path: Path) -> Path:
    """The root of the git checkout containing `path`."""
    try:
        found = worktrees.toplevel(path)
    except GitFailed as exc:
        raise FlowError(str(exc)) from exc
    if found is None:
        raise FlowError(
            f"{str(path)!r} is not inside a git repository; run the flow from a checkout "
            "(or make one with `acklab flow sandbox DIR`)"
        )
    return found


def head_sha(repo: Path) -> str:
    return git(repo, "rev-parse", "HEAD").stdout.strip()


def identity_env(repo: Path) -> dict[str, str]:
    """FLOW_IDENTITY for whatever the repository (or the environment) does not already set."""
    env: dict[str, str] = {}
    if not git(repo, "config", "user.name", check=False).stdout.strip():
        env.update({k: v for k, v in FLOW_IDENTITY.items() if "NAME" in k and k not in os.environ})
    if not git(repo, "config", "user.email", check=False).stdout.strip():
        env.update({k: v for k, v in FLOW_IDENTITY.items() if "EMAIL" in k and k not in os.environ})
    return env


def repo_snapshot(repo: Path) -> dict[str, str]:
    """What "the repository was left exactly as it was" compares: status, diff, refs, worktrees."""

    def out(*args: str) -> str:
        return git(repo, *args).stdout

    return {
        "head": out("rev-parse", "HEAD"),
        "status": out("status", "--porcelain=v1", "--untracked-files=all", "--ignored=no"),
        "diff": out("diff", "HEAD"),
        "refs": out("for-each-ref", "--format=%(refname) %(objectname)"),
        "worktrees": out("worktree", "list", "--porcelain"),
    }


@dataclass(frozen=True)
class Worktree:
    """A detached checkout of `commit` in a temporary directory."""

    repo: Path
    path: Path
    commit: str

    def run(self, *args: str, input_text: str | None = None, check: bool = True) -> str:
        return git(self.path, *args, input_text=input_text, check=check).stdout

    def read(self, relpath: str) -> str:
        return (self.path / relpath).read_text(encoding="utf-8")

    def apply(self, diff: str, *, check_only: bool = False) -> None:
        args = ["apply", "--whitespace=nowarn"] + (["--check"] if check_only else [])
        git(self.path, *args, "-", input_text=diff)

    def changed_files(self) -> list[str]:
        out = git(self.path, "status", "--porcelain=v1", "--untracked-files=all").stdout
        return sorted(line[3:] for line in out.splitlines() if line.strip())


@contextmanager
def worktree(repo: Path, commit: str, *, label: str = "wt") -> Iterator[Worktree]:
    """Check out `commit` in a fresh temporary worktree; remove it (and its admin files) afterwards."""
    try:
        with leased_worktree(repo, commit, label=label) as path:
            yield Worktree(repo=repo, path=path, commit=commit)
    except GitFailed as exc:
        raise FlowError(str(exc)) from exc
