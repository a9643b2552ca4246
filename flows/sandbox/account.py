"""The unprivileged user untrusted code runs as: ``acklab-sandbox``, created by the lab when it is root.

A system account (``useradd --system``) with its own group, no home directory and no login
shell; it owns nothing but the private copies and scratch directories the lab hands it for
one run. It is created once and left in place (CI machines are root and start fresh; a
developer's machine keeps one more system user). Two flows starting at once both ask for
it: ``useradd`` refuses the second with "already exists" (exit 9) or "cannot lock" (exit 10,
tried again), and either way both end up with the same account.

Without bubblewrap (mode ``user``) no namespace keeps one place's code from another's files and
processes, so each place gets a uid of its own (`allocate`): ``acklab-sandbox-1``,
``acklab-sandbox-2``, ... (made the same way on first use), held under a lock only root can take
(`SLOTS_DIR`) for as long as the place is open. Before a slot is handed out and when it is
given back, every process of its uid is ended: a daemon left by one run never meets the next.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pwd
import shutil
import signal
import stat
import subprocess  # nosec B404
import time
from dataclasses import dataclass, field
from pathlib import Path

from acklab.flows.errors import SandboxUnavailable

USER = "acklab-sandbox"
_EXISTS, _LOCKED = 9, 10
LOCK_RETRY_S = 10.0
SLOTS = 64  # places open at once on one machine in mode `user`
SLOTS_DIR = Path("/run/acklab-sandbox")


@dataclass(frozen=True)
class Account:
    """The sandbox user's name and ids."""

    name: str
    uid: int
    gid: int


class AccountUnavailable(SandboxUnavailable):
    """The sandbox user does not exist and cannot be created (exit 5: nothing untrusted runs)."""


def lookup(name: str = USER) -> Account | None:
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        return None
    return Account(entry.pw_name, entry.pw_uid, entry.pw_gid)


def ensure(name: str = USER) -> Account:
    """The sandbox user, created when missing (root only); AccountUnavailable when it cannot be had."""
    found = lookup(name)
    if found is not None:
        return _checked(found)
    if os.geteuid() != 0:
        raise AccountUnavailable(
            f"the sandbox user {name!r} does not exist and only root can create it; run as root "
            f"(as CI does) or create it once: useradd --system --no-create-home --shell /usr/sbin/nologin "
            f"--user-group {name}"
        )
    useradd = shutil.which("useradd") or "/usr/sbin/useradd"
    argv = [useradd, "--system", "--no-create-home", "--home-dir", "/nonexistent"]
    argv += ["--shell", "/usr/sbin/nologin", "--user-group", name]
    deadline = time.monotonic() + LOCK_RETRY_S
    while True:
        try:
            done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=60)  # nosec B603
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise AccountUnavailable(f"cannot create the sandbox user {name!r}: {exc}") from exc
        if done.returncode in (0, _EXISTS):
            break
        if done.returncode == _LOCKED and time.monotonic() < deadline:  # another flow is adding it
            time.sleep(0.2)
            continue
        raise AccountUnavailable(
            f"cannot create the sandbox user {name!r} (useradd exit {done.returncode}: "
            f"{done.stderr.strip()[-300:]}); create it by hand: {' '.join(argv)}"
        )
    found = lookup(name)
    if found is None:
        raise AccountUnavailable(f"useradd reported success but {name!r} is not in the user database")
    return _checked(found)


def _checked(account: Account) -> Account:
    if account.uid == 0 or account.gid == 0:
        raise AccountUnavailable(
            f"the sandbox user {account.name!r} has uid {account.uid} / gid {account.gid}; it must be an "
            "unprivileged account (remove it and let the lab create it)"
        )
    return account


@dataclass
class Slot:
    """One sandbox uid, held by one place (its lock file open) until `release`."""

    account: Account
    lock: int = field(repr=False)

    def end_processes(self) -> None:
        """SIGKILL every process running as this slot's uid (a daemon its code left)."""
        end_processes_of(self.account.uid)

    def release(self) -> None:
        self.end_processes()
        if self.lock >= 0:
            os.close(self.lock)  # the lock goes with it
            self.lock = -1


def allocate(name: str = USER) -> Slot:
    """A uid no other open place holds (root only): the first free slot, its account made if missing."""
    where = _slots_dir()
    for n in range(1, SLOTS + 1):  # never the bubblewrap modes' own account: its processes are not ours
        fd = os.open(where / f"{n}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue
        try:
            slot = Slot(ensure(f"{name}-{n}"), fd)
            slot.end_processes()
        except BaseException:
            os.close(fd)
            raise
        return slot
    raise AccountUnavailable(
        f"all {SLOTS} sandbox users are held by places open on this machine; wait for a run to end, or "
        "install bubblewrap (apt-get install bubblewrap), whose namespaces need no user of their own"
    )


def _slots_dir() -> Path:
    """The lock directory: root's, closed to everyone else (a sandbox user could otherwise hold a slot)."""
    try:
        SLOTS_DIR.mkdir(mode=0o700, exist_ok=True)
        info = SLOTS_DIR.lstat()
    except OSError as exc:
        raise AccountUnavailable(f"cannot make the sandbox's slot directory {SLOTS_DIR}: {exc}") from exc
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o077:
        raise AccountUnavailable(
            f"{SLOTS_DIR} is not a directory of the lab's own, closed to others; remove it and run again"
        )
    return SLOTS_DIR


def end_processes_of(uid: int) -> None:
    """SIGKILL every process whose real or effective uid is `uid` (never uid 0)."""
    if uid == 0:
        return
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status", encoding="ascii", errors="replace") as status:
                uids = next((line.split()[1:3] for line in status if line.startswith("Uid:")), [])
        except OSError:
            continue
        if str(uid) in uids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(int(entry), signal.SIGKILL)
