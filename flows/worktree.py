"""Git plumbing for the flow: the repository's head, and isolated worktrees that always go away.

Every patch is applied, checked and attacked in a worktree of its own, checked out
(detached, so no branch is left behind) at the expected head in a temporary directory.
The caller's checkout, index and branches are never touched; the worktree and its
administrative files are removed on the way out, also when the flow fails or is interrupted.
A worktree is leased in the journal like every resource the lab creates: when the flow is
killed (kill -9, a cancelled CI job), `acklab janitor` removes it, from `git worktree list`
too. The lease's token, written beside it (`harness.procs.lease_witness.WorktreeMarker`), proves to
the janitor that the directory it is about to remove is the one the lease names.
"""

from __future__ import annotations

import os
import shutil
import subprocess  # nosec B404
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from acklab.harness.procs.leases import current_book

from .errors import FlowError

GIT_TIMEOUT_S = 120
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
    """Run `git -C repo args...`; raise FlowError naming the command and git's message on failure."""
    cmd = ["git", "-C", str(repo), *args]
    try:
        done = subprocess.run(  # nosec B603
            cmd,
            input=input_text,
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT_S,
            check=False,
            env={**os.environ, "GIT_TERMINAL_PROMPT": "0", **(env or {})},
        )
    except FileNotFoundError as exc:
        raise FlowError("git is not installed or not on PATH; the repair flow needs git") from exc
    except subprocess.TimeoutExpired as exc:
        raise FlowError(f"`git {' '.join(args)}` took longer than {GIT_TIMEOUT_S}s in {repo}") from exc
    if check and done.returncode != 0:
        message = (done.stderr or done.stdout).strip()
        raise FlowError(f"`git {' '.join(args)}` failed in {repo}: {message}")
    return done


def toplevel(path: Path) -> Path:
    """The root of the git checkout containing `path`."""
    done = git(path, "rev-parse", "--show-toplevel", check=False)
    if done.returncode != 0:
        raise FlowError(
            f"{str(path)!r} is not inside a git repository; run the flow from a checkout "
            "(or make one with `acklab flow sandbox DIR`)"
        )
    return Path(done.stdout.strip())


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
    tmp = Path(tempfile.mkdtemp(prefix=f"acklab-{label}-"))
    path = tmp / "checkout"
    leases = current_book()
    lease = leases.acquire("worktree", str(path), path=str(path), tmp=str(tmp), repo=str(repo.resolve()))
    try:
        git(repo, "worktree", "add", "--detach", "--quiet", str(path), commit)
        yield Worktree(repo=repo, path=path, commit=commit)
    finally:
        if path.exists():
            git(repo, "worktree", "remove", "--force", str(path), check=False)
        shutil.rmtree(tmp, ignore_errors=True)
        git(repo, "worktree", "prune", check=False)
        if not tmp.exists():  # what could not be removed stays leased, for the janitor
            leases.release(lease)
