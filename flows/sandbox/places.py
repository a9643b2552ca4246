"""A place for one checkout's untrusted code: a private copy of the checkout and a scratch directory.

Layout, in the lab's temp root (leased like every directory the lab makes)::

    acklab-sandbox-<label>-XXXX/      the lab's (0755), holds the lease's marker
        copy/                         the checkout's files, owned by the sandbox user
        scratch/{home,tmp}/           HOME and TMPDIR of the process, owned by the sandbox user

The copy holds what the checkout's working tree holds (tracked and untracked files that git
does not ignore; for a plain directory, everything but caches, virtualenvs and ``.git``),
never its ``.git``: the confined code cannot reach the repository the flow publishes from.
What was copied is hashed, so `changed` tells afterwards which files the code rewrote while it
ran. The place is removed on `close`; what cannot be removed stays leased, for the janitor.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import subprocess  # nosec B404
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from acklab.flows.errors import FlowError
from acklab.harness.procs.confinement import Launch, Network
from acklab.harness.procs.leases import Lease, current_book

from .account import Account, Slot

SKIPPED = frozenset(
    {
        ".git",
        "__pycache__",
        ".venv",
        "venv",
        "node_modules",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
        ".tox",
    }
)
GIT_TIMEOUT_S = 60


def _listed(checkout: Path) -> list[str] | None:
    """The working tree's files as git sees them (tracked, and untracked but not ignored); None
    when `checkout` is not the top of a git working tree."""
    if not (checkout / ".git").exists():
        return None
    argv = ["git", "-C", str(checkout), "ls-files", "-z", "--cached", "--others", "--exclude-standard"]
    try:
        done = subprocess.run(argv, capture_output=True, check=False, timeout=GIT_TIMEOUT_S)  # nosec B603 B607
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    return sorted({p for p in done.stdout.decode("utf-8", "surrogateescape").split("\0") if p})


def _walked(checkout: Path) -> list[str]:
    found: list[str] = []
    for top, dirs, files in os.walk(checkout):
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED)
        rel = Path(top).relative_to(checkout)
        found += [str(rel / f) if str(rel) != "." else f for f in sorted(files)]
    return found


def _digest(path: Path) -> str | None:
    """What a file holds (a link: where it points); None when it is gone or not a file."""
    try:
        info = path.lstat()
    except OSError:
        return None
    if stat.S_ISLNK(info.st_mode):
        return "link:" + os.readlink(path)
    if not stat.S_ISREG(info.st_mode):
        return None
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 16), b""):
            digest.update(chunk)
    return digest.hexdigest()


def copy_files(checkout: Path, into: Path) -> dict[str, str]:
    """Copy the working tree of `checkout` into `into` (links as links, never followed); the digest
    of every file copied."""
    names = _listed(checkout)
    if names is None:
        names = _walked(checkout)
    digests: dict[str, str] = {}
    for name in names:
        source = checkout / name
        target = into / name
        try:
            info = source.lstat()
        except OSError:  # listed by git but deleted in the working tree
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        if stat.S_ISLNK(info.st_mode):
            os.symlink(os.readlink(source), target)
        elif stat.S_ISREG(info.st_mode):
            shutil.copy2(source, target, follow_symlinks=False)
        else:
            continue
        digests[name] = _digest(target) or ""
    return digests


def _chown_tree(top: Path, account: Account) -> None:
    os.chown(top, account.uid, account.gid, follow_symlinks=False)
    for where, dirs, files in os.walk(top):
        for name in dirs + files:
            os.chown(Path(where) / name, account.uid, account.gid, follow_symlinks=False)


@dataclass
class Place:
    """One checkout's private copy and scratch directory (a `Confined` of `harness.procs.confinement`)."""

    top: Path
    copied: dict[str, str]
    wrap: Callable[[Place, Launch, Network], Launch] = field(repr=False)
    lease: Lease | None = field(default=None, repr=False)
    account: Account | None = None  # who owns the copy and scratch (None: the lab's own user)
    slot: Slot | None = field(default=None, repr=False)  # a uid of the place's own, held until closed

    @property
    def root(self) -> Path:
        return self.top / "copy"

    @property
    def scratch(self) -> Path:
        return self.top / "scratch"

    def launch(self, launch: Launch, *, network: Network = "loopback") -> Launch:
        return self.wrap(self, launch, network)

    def changed(self) -> list[str]:
        return sorted(name for name, digest in self.copied.items() if _digest(self.root / name) != digest)

    def close(self) -> None:
        if self.slot is not None:  # its uid's processes end first: nothing writes while it is removed
            self.slot.end_processes()
        shutil.rmtree(self.top, ignore_errors=True)
        if self.slot is not None:  # the uid goes back to the pool once nothing of it is left here
            self.slot.release()
            self.slot = None
        if self.lease is not None and not self.top.exists():
            current_book().release(self.lease)
            self.lease = None


def make_place(
    checkout: Path,
    *,
    label: str,
    account: Account | None,
    wrap: Callable[[Place, Launch, Network], Launch],
    slot: Slot | None = None,
) -> Place:
    """Copy `checkout` into a fresh place (owned by `account` when given, a uid the place holds
    alone when `slot` is given) and lease it."""
    checkout = checkout.resolve()
    if not checkout.is_dir():
        raise FlowError(f"cannot confine {str(checkout)!r}: not a directory")
    top = Path(tempfile.mkdtemp(prefix=f"acklab-sandbox-{label}-"))
    top.chmod(0o755)  # the sandbox user passes through to its copy and scratch; the marker stays ours
    lease = current_book().acquire("directory", str(top), path=str(top))
    place = Place(top=top, copied={}, wrap=wrap, lease=lease, account=account, slot=slot)
    try:
        place.root.mkdir()
        for sub in ("home", "tmp"):
            (place.scratch / sub).mkdir(parents=True)
        place.copied = copy_files(checkout, place.root)
        if account is not None:
            _chown_tree(place.root, account)
            _chown_tree(place.scratch, account)
            place.scratch.chmod(0o700)
        else:
            # The lab's own user (--unsandboxed, or bubblewrap as an ordinary user): a server the
            # code starts as another user (the tests' PostgreSQL, run as `postgres` under root)
            # needs its TMPDIR, as it would need /tmp.
            place.scratch.chmod(0o711)
            (place.scratch / "tmp").chmod(0o1777)
    except BaseException:
        place.close()
        raise
    return place
