"""The one way the lab picks a port: ask the kernel for a free one on a loopback address.

Every service the lab starts (the fixture, a spec's `command:`, a private PostgreSQL, the
sinks) listens on a port picked here. The socket is closed before the port is handed out,
so between the pick and the service's own bind another process may take it. Labs running side by
side (CI shards, a test run's workers, the bench's runs at once) are the likeliest such process:
each port handed out is claimed for `CLAIM_S` in the lab's private runtime directory (an empty
file per port, created exclusively), and a port another lab claimed lately is not handed out again. A
process that is not a lab can still take a port first; the services report that plainly.
"""

from __future__ import annotations

import contextlib
import os
import socket
import stat
import time
from pathlib import Path

from acklab.harness.runtime import runtime_dir

# How long a port handed out stays claimed: long enough for a setup and a slow start to bind it.
CLAIM_S = 300.0
# Picks before a port is handed out unclaimed (the kernel picks at random from ~28,000 ports).
PICKS = 20
# Past this many claim files, the expired ones are removed (a claim is one empty file).
PRUNE_OVER = 2000


def _pick(host: str) -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def claims_dir() -> Path | None:
    """The claims directory (0700, in the lab's own runtime directory), or None when it cannot be
    trusted: not a directory of this user's, or a symlink (another user may have made it first)."""
    try:
        path = runtime_dir() / "ports"
        with contextlib.suppress(FileExistsError):
            path.mkdir(mode=0o700)
        info = path.lstat()
    except OSError:
        return None
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        return None
    return path


def _claim(folder: Path, port: int, now: float) -> bool:
    """Claim `port` for this process: False if another lab claimed it less than `CLAIM_S` ago."""
    path = folder / str(port)
    try:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW, 0o600))
        return True
    except FileExistsError:
        pass
    except OSError:
        return True  # a claim that cannot be written changes nothing: the port is free now
    try:
        if now - path.lstat().st_mtime < CLAIM_S:
            return False
        os.utime(path, (now, now))  # an expired claim: the port is this process's now
    except OSError:
        return False
    return True


def _prune(folder: Path, now: float) -> None:
    found: list[os.DirEntry[str]] = []
    with contextlib.suppress(OSError), os.scandir(folder) as entries:
        found = list(entries)
    if len(found) <= PRUNE_OVER:
        return
    for entry in found:
        with contextlib.suppress(OSError):
            if now - entry.stat(follow_symlinks=False).st_mtime >= CLAIM_S:
                os.unlink(entry.path)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on `host` that nothing listens on right now, and that no other lab on this
    machine was handed in the last `CLAIM_S` seconds."""
    folder = claims_dir()
    port = _pick(host)
    if folder is None:
        return port
    now = time.time()
    for _ in range(PICKS):
        if _claim(folder, port, now):
            break
        port = _pick(host)
    _prune(folder, now)
    return port
