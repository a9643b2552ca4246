"""The unprivileged user untrusted code runs as: ``acklab-sandbox``, created by the lab when it is root.

A system account (``useradd --system``) with its own group, no home directory and no login
shell; it owns nothing but the private copies and scratch directories the lab hands it for
one run. It is created once and left in place (CI machines are root and start fresh; a
developer's machine keeps one more system user). Two flows starting at once both ask for
it: ``useradd`` refuses the second with "already exists" (exit 9) or "cannot lock" (exit 10,
tried again), and either way both end up with the same account.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess  # nosec B404
import time
from dataclasses import dataclass

from acklab.flows.errors import SandboxUnavailable

USER = "acklab-sandbox"
_EXISTS, _LOCKED = 9, 10
LOCK_RETRY_S = 10.0


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
