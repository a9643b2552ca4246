"""Who serves the endpoint: the process that owns a listening socket, and whether it is the job's.

A spec without ``command:`` names a service the lab did not start. In CI that is where a
server left over from an earlier job (``setup: uvicorn ... &`` on a shell executor) can
answer instead of this job's, and a green verdict would then be about someone else's code.
So before the first delivery the lab asks the OS who listens on the endpoint's port
(Linux: ``/proc/net/tcp`` and ``tcp6`` for the socket's inode, ``/proc/<pid>/fd`` for its
owner) and records it in the incident (``target.listener``).

**The job** is the processes this run belongs with:

* the lab's own descendants (a service it started; the in-process server of the pytest
  plugin is the lab itself);
* the lab's process group: GitLab Runner starts every job's script in a process group of
  its own, and ``uvicorn ... &`` in that script stays in it;
* the descendants of the lab's parent process — the shell that started the server with
  ``&`` and then ``acklab`` (unless that parent is PID 1, whose descendants are everything).

An owner outside the job is refused in CI (exit 5, naming its pid and command line and the
fix) unless ``--allow-foreign-service`` says you started it yourself (a container's published
port). On a developer's machine — no ``CI`` variable, none of GitLab's — a service started in
another terminal is the normal way to work: the run goes on, warns, and records who served it. Where the OS does not say (no ``/proc``, a socket owned by
another user or in another network namespace), the owner is recorded as unknown and nothing
is refused: the check proves what it can see, and says when it could not look.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PROC = Path("/proc")
# Set by every CI service (CI=true: GitLab, GitHub Actions, CircleCI, Travis...) or by GitLab's
# runner alone (a job whose script unset CI still has these).
CI_MARKERS = ("CI", "GITLAB_CI", "CI_JOB_ID", "CI_SERVER")
LISTEN = "0A"
MAX_CMDLINE = 200
MAX_DEPTH = 512  # an ancestor chain is never this long; a cycle (a pid reused mid-walk) stops here


@dataclass(frozen=True)
class Listener:
    """What the OS says about the endpoint's listening socket."""

    port: int
    pids: tuple[int, ...] = ()  # every process holding the socket (gunicorn: master and workers)
    command: str | None = None  # the first one's command line, cut
    in_job: bool | None = None  # None: the OS did not say
    how: str = ""  # why it is (not) the job's, or why nothing is known

    @property
    def pid(self) -> int | None:
        return self.pids[0] if self.pids else None

    def describe(self) -> dict[str, Any]:
        """The incident's ``target.listener``."""
        described: dict[str, Any] = {"port": self.port, "in_job": self.in_job, "how": self.how}
        if self.pid is not None:
            described["pid"] = self.pid
        if self.command is not None:
            described["command"] = self.command
        return described


def in_ci(environ: Mapping[str, str] | None = None) -> str | None:
    """The variable that says this process runs in CI (``CI=true``, ``GITLAB_CI=true``...), or None."""
    env = os.environ if environ is None else environ
    for name in CI_MARKERS:
        value = env.get(name, "").strip().lower()
        if value and value not in ("0", "false", "no", "off"):
            return f"{name}={env[name]}" if name in ("CI", "GITLAB_CI") else name
    return None


def _socket_inodes(port: int, host: str) -> set[str] | None:
    """Inodes of the sockets listening on `port` (on `host` or every address); None: no /proc/net."""
    found: set[str] = set()
    seen_table = False
    try:
        wanted = ipaddress.ip_address(host)
    except ValueError:
        wanted = None
    for table in ("tcp", "tcp6"):
        try:
            lines = (PROC / "net" / table).read_text().splitlines()[1:]
        except OSError:
            continue
        seen_table = True
        for line in lines:
            fields = line.split()
            if len(fields) < 10 or fields[3] != LISTEN:
                continue
            address, _, hex_port = fields[1].partition(":")
            if int(hex_port, 16) != port:
                continue
            local = _address(address)
            if (
                wanted is None
                or local is None
                or local.is_unspecified
                or local == wanted
                or _same_loopback(local, wanted)
            ):
                found.add(fields[9])
    return found if seen_table else None


def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        raw = bytes.fromhex(text)
    except ValueError:
        return None
    if len(raw) == 4:
        return ipaddress.IPv4Address(raw[::-1])
    if len(raw) == 16:
        # /proc writes each 32-bit word in host (little-endian) order
        words = b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4))
        address = ipaddress.IPv6Address(words)
        return address.ipv4_mapped or address
    return None


def _same_loopback(a: ipaddress.IPv4Address | ipaddress.IPv6Address, b: Any) -> bool:
    return bool(a.is_loopback and getattr(b, "is_loopback", False))


def _owners(inodes: set[str]) -> tuple[list[int], bool]:
    """The pids holding one of `inodes`, and whether some process's fds could not be read."""
    targets = {f"socket:[{inode}]" for inode in inodes}
    owners: list[int] = []
    hidden = False
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fds = list((entry / "fd").iterdir())
        except PermissionError:
            hidden = True
            continue
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(fd) in targets:
                    owners.append(int(entry.name))
                    break
            except OSError:
                continue
    return sorted(owners), hidden


def _stat(pid: int) -> tuple[int, int] | None:
    """(ppid, pgid) of `pid` from /proc/<pid>/stat."""
    try:
        text = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    fields = text.rpartition(")")[2].split()  # the command name may hold spaces and parentheses
    return (int(fields[1]), int(fields[2])) if len(fields) > 2 else None


def _ancestors(pid: int) -> list[int]:
    chain, current = [], pid
    for _ in range(MAX_DEPTH):
        stat = _stat(current)
        if stat is None or stat[0] in (0, current):
            break
        current = stat[0]
        chain.append(current)
    return chain


def _cmdline(pid: int) -> str | None:
    try:
        raw = (PROC / str(pid) / "cmdline").read_bytes()[:4096]
    except OSError:
        return None
    text = " ".join(part.decode("utf-8", "replace") for part in raw.split(b"\0") if part)
    return text[:MAX_CMDLINE] + ("…" if len(text) > MAX_CMDLINE else "")


def in_job(pid: int) -> tuple[bool, str]:
    """Whether `pid` is one of the job's processes (module docstring), and why."""
    me, parent = os.getpid(), os.getppid()
    group = os.getpgid(0)
    if pid == me:
        return True, "the lab itself serves it"
    ancestors = _ancestors(pid)
    if me in ancestors:
        return True, "the lab started it"
    stat = _stat(pid)
    if stat is not None and stat[1] == group:
        return True, f"it is in the lab's process group {group}"
    if parent > 1 and parent in ancestors:
        return True, f"it descends from the lab's parent process {parent}"
    return False, (
        f"it is neither the lab's descendant, nor in the lab's process group {group}, nor a descendant "
        f"of the lab's parent process {parent}"
    )


def listener_of(host: str, port: int) -> Listener:
    """Who listens on `host`:`port`, and whether it is the job's (see the module docstring)."""
    inodes = _socket_inodes(port, host)
    if inodes is None:
        return Listener(port, how="the OS does not say who listens (no /proc/net/tcp)")
    if not inodes:
        return Listener(
            port, how=f"no listening socket on port {port} is visible here (another network namespace?)"
        )
    owners, hidden = _owners(inodes)
    if not owners:
        why = "owned by a process this user may not inspect" if hidden else "its owner was not found"
        return Listener(port, how=f"the listening socket is {why}")
    verdicts = [(pid, *in_job(pid)) for pid in owners]
    inside = [v for v in verdicts if v[1]]
    pid, ok, how = inside[0] if inside else verdicts[0]
    ordered = (pid, *(p for p in owners if p != pid))
    return Listener(port, ordered, _cmdline(pid), ok, how)
