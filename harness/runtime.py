"""The lab's own places on this machine: the temp root every temp resource of the lab lives in
(an ``acklab-*`` child of the system temp directory), and the lab's private runtime directory
in it (pid-files of its leases, the ports it handed out)."""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path

TEMP_PREFIX = "acklab-"


def temp_root() -> Path:
    """The lab's temp root: the system temp directory, where every temp resource is an ``acklab-*`` child."""
    return Path(tempfile.gettempdir()).resolve()


def runtime_dir(*, create: bool = True) -> Path:
    """The lab's own 0700 directory (pid-files, port claims); refused when it is not this user's or
    is a link."""
    path = temp_root() / f"{TEMP_PREFIX}leases-{os.getuid()}"
    if create:
        with contextlib.suppress(FileExistsError):
            path.mkdir(mode=0o700)
    info = path.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise PermissionError(f"{path} is not a private directory of this user; refusing to trust it")
    return path
