"""How a launch is confined, by what this machine allows (best first).

* ``bubblewrap+user`` (root, bubblewrap installed): bubblewrap started as root builds the
  namespace — the whole file system read-only, a private /tmp and /dev/shm, the lab's home
  and its evidence directories hidden under empty tmpfs (the interpreter's prefix and the
  virtualenv bound back read-only), the copy and the scratch directory bound writable, a PID
  namespace whose end kills every process in it (no daemon outlives the run), loopback only
  for checks — then `setpriv` drops to the sandbox user inside it, with no capability, no
  supplementary group and no way to gain privileges (``--no-new-privs``).
* ``bubblewrap`` (not root, unprivileged user namespaces): the same namespace, the same uid
  mapped into it; the home and the evidence are hidden by the mounts instead of by ownership.
* ``user`` (root, no bubblewrap): `setpriv` alone. The code runs as the sandbox user, so it
  cannot read the lab's 0700 evidence, its environment or write what root owns; but it shares
  the lab's PID namespace and network, sees /tmp, and a daemon it forks may outlive the run.
  Refused when the interpreter lies where that user cannot reach it (install bubblewrap).
* ``none`` (``--unsandboxed``, said in the trail, at the approve gate and in the MR note): the
  lab's own user; only the private copy and the allowlisted environment remain.
"""

from __future__ import annotations

import functools
import os
import shutil
import stat
import subprocess  # nosec B404
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from acklab.harness.procs.confinement import Launch, Network

from .account import Account
from .environment import confined_env
from .places import Place, make_place

ModeName = Literal["bubblewrap+user", "bubblewrap", "user", "none"]
PROBE_TIMEOUT_S = 30
DESCRIPTIONS: dict[str, str] = {
    "bubblewrap+user": "bubblewrap (read-only root, private /tmp, PID namespace, loopback-only checks) "
    "and the unprivileged user {user}, no capabilities",
    "bubblewrap": "bubblewrap in a user namespace (read-only root, the lab's home and evidence hidden, "
    "PID namespace, loopback-only checks), as the lab's own user",
    "user": "the unprivileged user {user} (setpriv), without bubblewrap: same PID namespace and network "
    "as the lab, /tmp shared, and a daemon it forks may outlive the run",
    "none": "UNSANDBOXED (--unsandboxed): the code under repair runs as the lab's own user; only a private "
    "copy and an allowlisted environment separate it from the lab",
}


@functools.cache
def usable_bwrap(as_root: bool) -> str | None:
    """bubblewrap's path when it can build a namespace here (tried once per process), else None."""
    found = shutil.which("bwrap")
    if found is None:
        return None
    argv = [found, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-pid"]
    argv += [] if as_root else ["--unshare-user"]
    try:
        done = subprocess.run(  # nosec B603
            [*argv, "--die-with-parent", "true"], capture_output=True, timeout=PROBE_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return found if done.returncode == 0 else None


def interpreter_paths() -> list[Path]:
    """What a confined Python needs to read: the interpreter's prefixes and the virtualenv."""
    paths = {Path(p).resolve() for p in (sys.base_prefix, sys.base_exec_prefix, sys.prefix, sys.exec_prefix)}
    return sorted(paths)


def blocked_ancestor(path: Path, account: Account) -> Path | None:
    """The first directory on the way to `path` that `account` cannot pass through (None: it can)."""
    for directory in [*reversed(path.parents), path]:
        try:
            info = directory.stat()
        except OSError:
            return directory
        if not stat.S_ISDIR(info.st_mode):
            continue
        if info.st_uid == account.uid:
            bit = stat.S_IXUSR
        elif info.st_gid == account.gid:
            bit = stat.S_IXGRP
        else:
            bit = stat.S_IXOTH
        if not info.st_mode & bit:
            return directory
    return None


@dataclass(frozen=True)
class Sandbox:
    """A `Confinement`: prepares places for checkouts and confines each launch in them."""

    name: ModeName
    account: Account | None = None
    bwrap: str | None = None
    setpriv: str | None = None
    hidden: tuple[Path, ...] = field(default=())

    def describe(self) -> str:
        return DESCRIPTIONS[self.name].format(user=self.account.name if self.account else "-")

    @property
    def unsandboxed(self) -> bool:
        return self.name == "none"

    def prepare(self, checkout: Path, *, label: str) -> Place:
        owner = self.account if self.name in ("bubblewrap+user", "user") else None
        return make_place(checkout, label=label, account=owner, wrap=self.wrap)

    def wrap(self, place: Place, launch: Launch, network: Network) -> Launch:
        user = self.account.name if self.account and self.name != "bubblewrap" else None
        env = confined_env(launch.env, place.scratch, user=user)
        cwd = launch.cwd or place.root
        argv = list(launch.argv)
        if self.name in ("bubblewrap+user", "user"):
            argv = [*self._drop(), *argv]
        if self.name in ("bubblewrap+user", "bubblewrap"):
            argv = [*self._namespace(place, cwd, network), *argv]
        return Launch(tuple(argv), env, cwd)

    def _drop(self) -> list[str]:
        if self.account is None or self.setpriv is None:
            raise ValueError(f"sandbox mode {self.name!r} drops to a user: it needs the account and setpriv")
        ids = [f"--reuid={self.account.uid}", f"--regid={self.account.gid}", "--clear-groups"]
        return [self.setpriv, *ids, "--no-new-privs", "--inh-caps=-all", "--bounding-set=-all", "--"]

    def _namespace(self, place: Place, cwd: Path, network: Network) -> list[str]:
        if self.bwrap is None:
            raise ValueError(f"sandbox mode {self.name!r} builds a namespace: it needs bubblewrap")
        argv = [self.bwrap, "--die-with-parent", "--unshare-pid", "--unshare-ipc", "--unshare-uts"]
        if self.name == "bubblewrap":
            argv.append("--unshare-user")
        if network == "loopback":
            argv.append("--unshare-net")
        argv += ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
        # Private, empty, world-writable like the real ones (PostgreSQL wants /dev/shm): not shared.
        argv += ["--perms", "1777", "--tmpfs", "/tmp", "--perms", "1777", "--tmpfs", "/dev/shm"]  # noqa: S108  # nosec B108
        hidden, needed = self._hidden_and_needed()
        for directory in hidden:
            argv += ["--perms", "0755", "--tmpfs", str(directory)]
        # Mounted empty here (the namespace's own /tmp too): a bind inside needs its folders made.
        empty = [*PRIVATE_TMP, *hidden]
        made: set[Path] = set()
        for path, how in [
            *((p, "--ro-bind") for p in needed),
            *((p, "--bind") for p in (place.root, place.scratch)),
        ]:
            for folder in _folders_inside(path, empty):
                if folder not in made:
                    made.add(folder)
                    argv += ["--perms", "0755", "--dir", str(folder)]
            argv += [how, str(path), str(path)]
        return [*argv, "--chdir", str(cwd)]

    def _hidden_and_needed(self) -> tuple[list[Path], list[Path]]:
        """Directories under an empty tmpfs (the lab's home, its evidence, whatever the sandbox user
        could not pass anyway) and the interpreter paths bound back under them."""
        hidden = {Path(p).resolve() for p in self.hidden}
        home = Path.home().resolve()
        if home != Path("/"):
            hidden.add(home)
        needed = interpreter_paths()
        if self.account is not None:
            hidden |= {b for p in needed if (b := blocked_ancestor(p, self.account)) is not None}
        # Parents first; a directory inside another hidden one needs no mount of its own.
        ordered = sorted(hidden, key=lambda p: len(p.parts))
        kept = [p for i, p in enumerate(ordered) if not any(p.is_relative_to(q) for q in ordered[:i])]
        # The namespace's /tmp and /dev/shm are empty too: an interpreter installed below them
        # (a project cloned into /tmp, its .venv there) is bound back like one in a hidden home.
        covered = [*kept, *PRIVATE_TMP]
        back = [p for p in needed if any(p.is_relative_to(h) for h in covered)]
        return kept, back


PRIVATE_TMP = (Path("/tmp"), Path("/dev/shm"))  # noqa: S108  # nosec B108
"""Mounted empty and private in every namespace the sandbox builds."""


def _folders_inside(path: Path, mounts: list[Path]) -> list[Path]:
    """The folders between the innermost of `mounts` that holds `path` and `path` itself (bubblewrap
    would make them 0700, closed to the sandbox user)."""
    holding = [m for m in mounts if path.is_relative_to(m) and path != m]
    if not holding:
        return []
    inner = max(holding, key=lambda m: len(m.parts))
    return [p for p in reversed(path.parents) if p.is_relative_to(inner) and p != inner]


def setpriv_path() -> str | None:
    return shutil.which("setpriv")


def is_root() -> bool:
    return os.geteuid() == 0
