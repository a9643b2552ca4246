"""What a setup runs from, as content: the digest that decides whether a template may stand in for it.

`digest_of` hashes every file's path, kind and bytes under a tree (links by their target, never
followed), so a patched checkout whose migrations differ by a byte has another digest. What
running the project rewrites by itself is left out — bytecode (``__pycache__``, ``*.pyc``), tool
caches, acklab's own evidence (``.acklab``, or any directory holding a run's journal), git's
metadata — and so are virtualenvs (a directory holding ``pyvenv.cfg``) and ``node_modules``:
installed dependencies do not change during one run or session, and hashing them would cost
more than most setups take. A tree past `MAX_FILES` or
`MAX_BYTES` is not fingerprinted at all (its setup runs on every serve). A file's digest is
remembered by its inode, size and change times, so a tree is read whole only once per process.
"""

from __future__ import annotations

import hashlib
import os
import stat
import threading
from pathlib import Path

from acklab.evidence.journal import JOURNAL_FILE

MAX_FILES = 50_000
MAX_BYTES = 2 << 30
SKIPPED_DIRS = frozenset(
    {
        ".git",
        "__pycache__",
        ".acklab",
        ".pytest_cache",
        ".mypy_cache",
        ".ruff_cache",
        ".tox",
        ".nox",
        "node_modules",
    }
)
SKIPPED_SUFFIXES = (".pyc", ".pyo")
CHUNK = 1 << 20

_known: dict[tuple[int, int, int, int, int], str] = {}
_known_lock = threading.Lock()


def _file_digest(path: Path, info: os.stat_result) -> str:
    key = (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)
    with _known_lock:
        known = _known.get(key)
    if known is not None:
        return known
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(CHUNK):
            digest.update(chunk)
    with _known_lock:
        _known[key] = digest.hexdigest()
    return digest.hexdigest()


def _skipped(directory: Path) -> bool:
    """A virtualenv, or an evidence directory of acklab's (a run writes its journal there meanwhile)."""
    return (directory / "pyvenv.cfg").is_file() or (directory / JOURNAL_FILE).is_file()


def digest_of(tree: Path) -> tuple[str | None, str | None]:
    """(the tree's content digest, None), or (None, why it cannot be fingerprinted)."""
    total = hashlib.sha256()
    files = size = 0
    try:
        for directory, dirs, names in os.walk(tree, followlinks=False):
            here = Path(directory)
            dirs[:] = sorted(d for d in dirs if d not in SKIPPED_DIRS and not _skipped(here / d))
            for name in sorted(names):
                if name.endswith(SKIPPED_SUFFIXES) or name == ".git":  # a worktree's .git is a file
                    continue
                path = here / name
                info = path.lstat()
                files += 1
                if files > MAX_FILES:
                    return None, f"{tree} holds more than {MAX_FILES} files, too many to fingerprint"
                relative = path.relative_to(tree).as_posix()
                if stat.S_ISLNK(info.st_mode):
                    entry = f"link {relative} {os.readlink(path)}"
                elif stat.S_ISREG(info.st_mode):
                    size += info.st_size
                    if size > MAX_BYTES:
                        return None, f"{tree} holds more than {MAX_BYTES >> 30} GiB, too much to fingerprint"
                    entry = f"file {relative} {info.st_mode & 0o111:o} {_file_digest(path, info)}"
                else:
                    entry = f"other {relative}"
                total.update(entry.encode("utf-8", "surrogateescape") + b"\0")
    except OSError as exc:
        return None, f"{tree} could not be read whole ({exc})"
    return total.hexdigest(), None


def holds_path(tree: Path, path: Path, *, skip: frozenset[str] = frozenset()) -> str | None:
    """The first file under `tree` (relative) whose bytes, or link target, hold `path` as text
    (absolute, or resolved); None: none does. Names in `skip` at the top are not read."""
    needles = {str(path).encode(), str(path.resolve()).encode()}
    longest = max(len(n) for n in needles)
    for directory, _, names in os.walk(tree, followlinks=False):
        here = Path(directory)
        for name in sorted(names):
            if here == tree and name in skip:
                continue
            file = here / name
            relative = file.relative_to(tree).as_posix()
            if file.is_symlink():
                if any(n in os.readlink(file).encode() for n in needles):
                    return relative
                continue
            if not file.is_file():
                continue
            with file.open("rb") as fh:
                tail = b""
                while chunk := fh.read(CHUNK):
                    window = tail + chunk
                    if any(n in window for n in needles):
                        return relative
                    tail = window[-(longest - 1) :]
    return None
