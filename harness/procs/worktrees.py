"""Leased git worktrees: a detached checkout of one commit in a temporary directory, always removed.

`acklab run --baseline REF` serves the code of REF beside the working tree's; the repair flow
checks out its head and its patches the same way. The caller's checkout, index and branches are
never touched. The worktree is leased in the journal (``worktree``, its token in
``<tmp>/.acklab-lease``, `harness.procs.lease_witness.WorktreeMarker`): after a kill -9,
`acklab janitor` removes it, and its entry in the repository's worktree list too.
"""

from __future__ import annotations

import os
import shutil
import subprocess  # nosec B404
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from acklab.harness.errors import HarnessError
from acklab.harness.procs.leases import current_book

GIT_TIMEOUT_S = 120


class GitFailed(HarnessError):
    """A git command the lab needed failed (exit 4), or git is missing."""


def git(
    repo: Path,
    *args: str,
    check: bool = True,
    input_text: str | None = None,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """`git -C repo ARGS` (an argv list, no shell, no prompt; `input_text` on stdin, `env` over the
    process's); GitFailed naming the command and git's message on failure."""
    try:
        # git from PATH, our own argv list, never a shell.
        done = subprocess.run(  # nosec B603 B607
            ["git", "-C", str(repo), *args],
            input=input_text,
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT_S,
            check=False,
            stdin=subprocess.DEVNULL if input_text is None else None,
            env={**os.environ, "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C", **(env or {})},
        )
    except FileNotFoundError as exc:
        raise GitFailed("git is not installed or not on PATH; install git") from exc
    except subprocess.TimeoutExpired as exc:
        raise GitFailed(f"`git {' '.join(args)}` took longer than {GIT_TIMEOUT_S}s in {repo}") from exc
    if check and done.returncode != 0:
        raise GitFailed(f"`git {' '.join(args)}` failed in {repo}: {(done.stderr or done.stdout).strip()}")
    return done


def toplevel(path: Path) -> Path | None:
    """The root of the git checkout holding `path`, or None outside one."""
    done = git(path if path.is_dir() else path.parent, "rev-parse", "--show-toplevel", check=False)
    return Path(done.stdout.strip()).resolve() if done.returncode == 0 else None


def resolve_commit(repo: Path, ref: str) -> str | None:
    """The full sha `ref` names in `repo` (a branch, a tag, HEAD~1, a sha), or None."""
    if not ref or ref.startswith("-"):
        return None
    done = git(repo, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}", check=False)
    sha = done.stdout.strip()
    return sha if done.returncode == 0 and sha else None


@contextmanager
def leased_worktree(repo: Path, commit: str, *, label: str = "wt") -> Iterator[Path]:
    """Check out `commit` (detached) in a fresh temporary worktree; remove it and its admin files after."""
    tmp = Path(tempfile.mkdtemp(prefix=f"acklab-{label}-"))
    path = tmp / "checkout"
    leases = current_book()
    lease = leases.acquire("worktree", str(path), path=str(path), tmp=str(tmp), repo=str(repo.resolve()))
    try:
        git(repo, "worktree", "add", "--detach", "--quiet", str(path), commit)
        yield path
    finally:
        if path.exists():
            git(repo, "worktree", "remove", "--force", str(path), check=False)
        shutil.rmtree(tmp, ignore_errors=True)
        git(repo, "worktree", "prune", check=False)
        if not tmp.exists():  # what could not be removed stays leased, for the janitor
            leases.release(lease)
