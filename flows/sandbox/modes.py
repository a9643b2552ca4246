"""How a launch is confined, by what this machine allows (best first).

* ``bubblewrap+user`` (root, bubblewrap installed): bubblewrap started as root builds the
  namespace — not the host's file system but a fresh root holding only what the code needs, read
  only: ``/usr``, ``/etc``, the top-level links into ``/usr``, the interpreter's prefix, the
  virtualenv and acklab's own packages (`library_paths`); a private ``/tmp``, ``/var/tmp`` and ``/dev/shm``; the copy and the scratch directory
  bound writable (nothing else of the repository, no ``.git``, no other run's place, no home, no
  evidence); a PID namespace whose end kills every process in it (no daemon outlives the run);
  a network namespace of its own (``--unshare-net``: checks get loopback only, served code is
  bridged, `bridge`) — then `setpriv` drops to the sandbox user inside it, with no capability, no
  supplementary group and no way to gain privileges (``--no-new-privs``).
* ``bubblewrap`` (not root, unprivileged user namespaces): the same namespace, the same uid
  mapped into it.
* ``user`` (root, no bubblewrap): `setpriv` alone, to a sandbox user of the place's own (`account`:
  one uid per place, so one run's code cannot reach another's files or processes). It cannot
  read the lab's 0700 evidence, its environment or write what root owns; but it sees the host's
  file system as that user may, shares the lab's PID namespace and **the host's network** (served
  code binds the host's loopback and may connect anywhere), sees /tmp, and a daemon it forks lives
  until its place is closed. Refused when the interpreter lies where that user cannot reach it
  (install bubblewrap).
* ``none`` (``--unsandboxed``, said in the trail, at the approve gate and in the MR note): the
  lab's own user; only the private copy and the allowlisted environment remain.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import shutil
import stat
import subprocess  # nosec B404
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from acklab.harness.procs.confinement import Bridged, Launch, Network

from . import account, bridge
from .account import Account
from .environment import confined_env
from .places import Place, make_place

ModeName = Literal["bubblewrap+user", "bubblewrap", "user", "none"]
PROBE_TIMEOUT_S = 30
DESCRIPTIONS: dict[str, str] = {
    "bubblewrap+user": "bubblewrap (only the system, the interpreter and its private copy mounted, read-only "
    "but for the copy; PID namespace; a network namespace of its own, the lab's bridge its only way out) "
    "and the unprivileged user {user}, no capabilities",
    "bubblewrap": "bubblewrap in a user namespace (only the system, the interpreter and its private copy "
    "mounted; PID namespace; a network namespace of its own, the lab's bridge its only way out), as the "
    "lab's own user",
    "user": "an unprivileged user of its own per place ({user}...) (setpriv), without bubblewrap: NO network "
    "namespace (served code uses the host's network and may reach anything on it), the host's file system "
    "as that user may read it, the lab's PID namespace, /tmp shared",
    "none": "UNSANDBOXED (--unsandboxed): the code under repair runs as the lab's own user, on the host's "
    "network and file system; only a private copy and an allowlisted environment separate it from the lab",
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


def interpreter_aliases() -> list[tuple[Path, Path]]:
    """(folder, the path it is reached by) for a prefix reached through a symbolic link (a virtualenv
    linked in from elsewhere): the confined Python is started by that path, so the folder is bound
    there too."""
    aliases = set()
    for prefix in (sys.base_prefix, sys.base_exec_prefix, sys.prefix, sys.exec_prefix):
        literal = Path(os.path.abspath(prefix))
        if literal != literal.resolve():
            aliases.add((literal.resolve(), literal))
    return sorted(aliases)


ACKLAB_PACKAGES = ("app", "harness", "evidence", "console", "flows")


@functools.cache
def library_paths() -> list[Path]:
    """acklab's own package folders. Installed from a wheel they are inside the virtualenv; installed
    editable they are a checkout's folders — bound one by one, never the checkout (its .git) — so
    acklab's pytest plugin, which pytest loads in every confined test run, is found there too."""
    found = set()
    for name in ("acklab", *(f"acklab.{package}" for package in ACKLAB_PACKAGES)):
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.origin:  # its __init__.py: the folder, not a checkout on its path
            found.add(Path(spec.origin).resolve().parent)
    return sorted(found)


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

    @property
    def own_network(self) -> bool:
        """Whether confined code runs in a network namespace of its own (else: the host's)."""
        return self.bwrap is not None

    def prepare(self, checkout: Path, *, label: str) -> Place:
        if self.name == "user":  # no namespace keeps places apart: a uid of its own does
            slot = account.allocate()
            try:
                return make_place(checkout, label=label, account=slot.account, wrap=self.wrap, slot=slot)
            except BaseException:
                slot.release()
                raise
        owner = self.account if self.name == "bubblewrap+user" else None
        return make_place(checkout, label=label, account=owner, wrap=self.wrap)

    def wrap(self, place: Place, launch: Launch, network: Network) -> Launch:
        runs_as = place.account if self.name in ("bubblewrap+user", "user") else None
        env = confined_env(launch.env, place.scratch, user=runs_as.name if runs_as else None)
        cwd = launch.cwd or place.root
        argv = list(launch.argv)
        # Without a namespace (user, none) served code is on the host's network: nothing to bridge.
        bridged = network if isinstance(network, Bridged) and self.bwrap is not None else None
        if bridged is not None:
            argv = bridge.inside(bridged, argv)
        if runs_as is not None:
            argv = [*self._drop(runs_as), *argv]
        if self.bwrap is not None:
            argv = [*self._namespace(place, cwd), *argv]
        if bridged is not None:
            argv = bridge.outside(bridged, argv)
        return Launch(tuple(argv), env, cwd)

    def _drop(self, runs_as: Account) -> list[str]:
        if self.setpriv is None:
            raise ValueError(f"sandbox mode {self.name!r} drops to a user: it needs setpriv")
        ids = [f"--reuid={runs_as.uid}", f"--regid={runs_as.gid}", "--clear-groups"]
        return [self.setpriv, *ids, "--no-new-privs", "--inh-caps=-all", "--bounding-set=-all", "--"]

    def _namespace(self, place: Place, cwd: Path) -> list[str]:
        """bubblewrap's argv: a fresh root with the system, the interpreter and the place (the
        host's root is never bound: nothing of the repository beyond the copy, no other place)."""
        if self.bwrap is None:
            raise ValueError(f"sandbox mode {self.name!r} builds a namespace: it needs bubblewrap")
        argv = [self.bwrap, "--die-with-parent", "--unshare-pid", "--unshare-ipc", "--unshare-uts"]
        argv += ["--unshare-net"]  # loopback only; served code is bridged (`bridge`)
        if self.name == "bubblewrap":
            argv.append("--unshare-user")
        argv += ["--dev", "/dev", "--proc", "/proc"]
        tree = _Tree()
        argv += _system(tree)
        for path in (*interpreter_paths(), *library_paths()):
            argv += tree.bind("--ro-bind", path)
        for folder, alias in interpreter_aliases():
            argv += tree.bind("--ro-bind", folder, alias)
        for path in (place.root, place.scratch):
            argv += tree.bind("--bind", path)
        # The lab's home and evidence are never bound; where a bound folder holds one, it is covered.
        for hidden in sorted({Path(p).resolve() for p in (*self.hidden, Path.home())}):
            if hidden != Path("/") and tree.covers(hidden):
                argv += ["--perms", "0755", "--tmpfs", str(hidden)]
        return [*argv, "--remount-ro", "/", "--chdir", str(cwd)]


def _system(tree: _Tree) -> list[str]:
    """The host's system in a fresh root: `SYSTEM_TREES` read-only, the `TOP_LEVEL` links into /usr,
    and the `PRIVATE_TMP` folders empty."""
    argv: list[str] = []
    for system in SYSTEM_TREES:
        if system.is_dir():
            argv += tree.bind("--ro-bind", system)
    for link in TOP_LEVEL:
        if link.is_symlink():
            argv += ["--symlink", os.readlink(link), str(link)]
        elif link.is_dir():
            argv += tree.bind("--ro-bind", link.resolve(), link)
    # Private, empty, world-writable like the real ones (PostgreSQL wants /dev/shm): not shared.
    for private in PRIVATE_TMP:
        argv += [*tree.folders(private), "--perms", "1777", "--tmpfs", str(private)]
        tree.empty.append(private)
    return argv


SYSTEM_TREES = (Path("/usr"), Path("/etc"))
"""Bound read-only: programs, libraries, locales, time zones, the user database, certificates."""
TOP_LEVEL = tuple(Path("/", name) for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"))
"""Links into /usr on a merged-/usr system (made as links), or folders of their own (bound)."""
PRIVATE_TMP = (Path("/tmp"), Path("/var/tmp"), Path("/dev/shm"))  # noqa: S108  # nosec B108
"""Mounted empty and private in every namespace the sandbox builds."""


@dataclass
class _Tree:
    """What a namespace's fresh root holds so far: bound paths and empty mounts; the folders made."""

    bound: list[Path] = field(default_factory=list)
    empty: list[Path] = field(default_factory=list)
    made: set[Path] = field(default_factory=set)

    def covers(self, path: Path) -> bool:
        return any(path == b or path.is_relative_to(b) for b in self.bound)

    def folders(self, path: Path) -> list[str]:
        """``--dir`` for each folder on the way to `path` not yet there (bubblewrap would make them
        0700, closed to the sandbox user): 0755, like the host's."""
        argv: list[str] = []
        for folder in reversed(path.parents):
            if folder == Path("/") or folder in self.made or self.covers(folder):
                continue
            self.made.add(folder)
            argv += ["--perms", "0755", "--dir", str(folder)]
        return argv

    def bind(self, how: str, source: Path, where: Path | None = None) -> list[str]:
        where = where or source
        if how == "--ro-bind" and self.covers(where):
            return []  # already visible, read-only, through a folder bound before
        self.bound.append(where)
        return [*self.folders(where), how, str(source), str(where)]


def setpriv_path() -> str | None:
    return shutil.which("setpriv")


def is_root() -> bool:
    return os.geteuid() == 0
