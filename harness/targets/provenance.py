"""Which code a verdict is about: the commit of the handler under test, for the incident's target.

``CI_COMMIT_SHA`` when a pipeline sets it; otherwise ``git rev-parse HEAD`` of the checkout
the handler's code comes from (the fixture: the checkout holding the imported ``app``
package; a target spec: the working directory). ``dirty`` says whether that checkout had
uncommitted changes when the run started (a repair flow tests a patch before committing
it): the sha alone would then name code that is not what ran. Neither is ever a reason to
fail a run: without git, outside a repository, or when git refuses (another user's
checkout), both are unknown (None).

A verdict's identity is the target's name plus this revision. For the built-in fixture the
revision also carries ``handler_sha256``, the content hash of the handler module that ran:
the fixture's commit names the lab's checkout, while the hash names the handler itself (the
repair flow's sandbox holds the unsafe handler under the live name, at another commit).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import stat
import subprocess  # nosec B404
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

GIT_TIMEOUT_S = 10.0
MAX_HASHED_BYTES = 16 << 20  # a handler module is kilobytes; past this it names nothing
_SHA = re.compile(r"[0-9a-f]{7,64}")
CHANGES_LABEL = 6  # hex digits of the changes' hash in a label (b02f02d7+3fa1c2)
_GIT_ENV = {"LC_ALL": "C", "GIT_PAGER": "cat", "GIT_OPTIONAL_LOCKS": "0"}


@dataclass(frozen=True)
class Revision:
    """The commit of the code under test, and whether its checkout was dirty (None: unknown)."""

    commit_sha: str | None = None
    dirty: bool | None = None
    handler_sha256: str | None = None  # the fixture: sha256 of the handler module's source
    changes: str | None = None  # sha256 of the tracked changes (`git diff HEAD --binary`), when dirty

    @property
    def label(self) -> str | None:
        """``<commit[:8]>``, ``<commit[:8]>+<changes[:6]>`` when dirty, None when the commit is unknown."""
        if self.commit_sha is None:
            return None
        if self.dirty and self.changes:
            return f"{self.commit_sha[:8]}+{self.changes[:CHANGES_LABEL]}"
        return self.commit_sha[:8] + ("+dirty" if self.dirty else "")

    def describe(self) -> dict[str, Any]:
        """The incident's ``target.commit_sha`` (always), ``target.dirty``, ``target.changes`` and
        ``target.handler_sha256`` (when known)."""
        described: dict[str, Any] = {"commit_sha": self.commit_sha}
        if self.dirty is not None:
            described["dirty"] = self.dirty
        if self.dirty and self.changes is not None:
            described["changes"] = self.changes
        if self.handler_sha256 is not None:
            described["handler_sha256"] = self.handler_sha256
        return described


def _git(directory: Path, *args: str) -> str | None:
    """`git -C directory ARGS`'s stdout, or None when git is missing or fails in any way."""
    git = shutil.which("git")
    if git is None or not directory.is_dir():
        return None
    try:
        # git by absolute path, our own argv list, no shell.
        done = subprocess.run(  # nosec B603
            [git, "-C", str(directory), *args],
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT_S,
            check=False,
            stdin=subprocess.DEVNULL,
            # A locale or pager of the user's must not change what we parse.
            env={**os.environ, **_GIT_ENV},
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def _changes_sha256(directory: Path) -> str | None:
    """The sha256 of ``git diff HEAD --binary`` (every tracked change, staged or not), streamed:
    a large diff is hashed, never held; None when git fails or takes too long."""
    git = shutil.which("git")
    if git is None:
        return None
    digest = hashlib.sha256()
    try:
        # git by absolute path, our own argv list, no shell.
        with subprocess.Popen(  # nosec B603
            [git, "-C", str(directory), "diff", "HEAD", "--binary", "--no-color", "--no-ext-diff"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **_GIT_ENV},
        ) as proc:
            while proc.stdout is not None and (chunk := proc.stdout.read(1 << 16)):
                digest.update(chunk)
            code = proc.wait(timeout=GIT_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError):
        return None
    return digest.hexdigest() if code == 0 else None


def _ci_sha(env: Mapping[str, str]) -> str | None:
    value = env.get("CI_COMMIT_SHA", "").strip().lower()
    return value if _SHA.fullmatch(value) else None


def revision_of(directory: Path | None, env: Mapping[str, str] | None = None) -> Revision:
    """The revision of the code in `directory` (any folder inside its checkout)."""
    env = os.environ if env is None else env
    head = status = changes = None
    if directory is not None:
        head = _git(directory, "rev-parse", "--verify", "--quiet", "HEAD")
        # Only a checkout with a commit has a meaningful "dirty" (an empty repository has no HEAD).
        status = _git(directory, "status", "--porcelain", "--untracked-files=no") if head else None
        if status is not None and status.strip():
            changes = _changes_sha256(directory)
    sha = _ci_sha(env) or (head.strip() if head and _SHA.fullmatch(head.strip()) else None)
    dirty = None if status is None else bool(status.strip())
    return Revision(commit_sha=sha, dirty=dirty, changes=changes)


def file_sha256(path: Path, *, max_bytes: int = MAX_HASHED_BYTES) -> str | None:
    """The sha256 of a regular file's bytes (a handler module); None when it cannot be read,
    is not a regular file (a link is never followed: a checkout under test may plant one to
    /dev/zero) or is larger than `max_bytes`."""
    try:
        st = path.lstat()
        if not stat.S_ISREG(st.st_mode) or st.st_size > max_bytes:
            return None
        digest = hashlib.sha256()
        with path.open("rb") as fh:
            while chunk := fh.read(1 << 16):
                digest.update(chunk)
                if fh.tell() > max_bytes:  # grew while read
                    return None
    except OSError:
        return None
    return digest.hexdigest()
