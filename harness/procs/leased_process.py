"""A process the lab starts and may kill -9: its own session, a log file, a lease while alive.

The fixture run as a process (crash experiments) and a target's own service (``command:``)
both need the same life cycle: start with argv (never a shell) in a new session so that a
crash and the janitor end the whole process group, write its output to a log whose tail
explains a failed start, and hold a lease in the journal from start to end. Subclasses
say what they start and how they know it is ready. Given a `Confined` place
(`harness.procs.confinement`), the process is started confined in it: the place turns the
launch into its sandboxed argv, environment and working directory.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess  # nosec B404
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Self

from acklab.harness.errors import HarnessError
from acklab.harness.procs.confinement import Confined, Launch, Network
from acklab.harness.procs.leases import NO_LEASES, Lease, LeaseBook, start_ticks

GROUP_GONE_S = 10.0


def live_members(pgid: int) -> list[int]:
    """Pids in process group `pgid` that are not zombies (a zombie holds no socket)."""
    members = []
    try:
        entries = os.listdir("/proc")
    except OSError:  # no procfs: ask the kernel about the group as a whole
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return []
        return [pgid]
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        # After "pid (comm)": state, ppid, pgrp, ...
        if len(fields) > 2 and fields[2] == str(pgid) and fields[0] not in ("Z", "X"):
            members.append(int(entry))
    return members


def wait_group_gone(pgid: int, timeout_s: float) -> bool:
    """Wait until no live process is left in group `pgid` (bounded); False if some still are."""
    deadline = time.monotonic() + timeout_s
    while live_members(pgid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


class LeasedProcess:
    """Start, SIGKILL (the whole group, as a crash would), stop and restart one process."""

    what = "process"

    def __init__(self, *, log_dir: Path, log_prefix: str, leases: LeaseBook = NO_LEASES) -> None:
        self._log_dir = log_dir
        self._log_prefix = log_prefix
        self._leases = leases
        self._proc: subprocess.Popen[bytes] | None = None
        self._lease: Lease | None = None
        self._log: Path | None = None
        self.starts = 0
        # Ready: the subclass's readiness check passed since the last start. Down: why the last
        # (re)start failed — later trials say so instead of blaming the handler.
        self.ready = False
        self.down_reason: str | None = None

    def state(self) -> tuple[bool, int]:
        """(ready, starts): a delivery answered by the same ready process reads the same pair twice."""
        return self.ready and self.running(), self.starts

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def _spawn(
        self,
        argv: Sequence[str],
        env: Mapping[str, str],
        *,
        lease_what: str,
        cwd: Path | None = None,
        confined: Confined | None = None,
        network: Network = "loopback",
    ) -> None:
        """Start `argv` (a list, no shell) with its output in a fresh log, and lease it.

        With `confined`, `env` is the process's own variables and the place confines the launch.
        """
        if confined is not None:
            launch = confined.launch(Launch(tuple(argv), dict(env), cwd), network=network)
            argv, env, cwd = launch.argv, launch.env, launch.cwd
        if self.running():
            raise HarnessError(f"the {self.what} (pid {self.pid}) is still running; kill it first")
        self._finish()
        self.ready = False
        self.starts += 1
        self._log = self._log_dir / f"{self._log_prefix}-{self.starts}.log"
        with self._log.open("wb") as log:
            # Our own interpreter or the spec's own command, as an argv list, never a shell.
            self._proc = subprocess.Popen(  # nosec B603
                list(argv),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=dict(env),
                cwd=cwd,
                start_new_session=True,  # its own process group: a crash and the janitor end all of it
            )
        pid = self._proc.pid
        ticks = start_ticks(pid)
        self._lease = self._leases.acquire(
            "process", f"{pid}:{ticks}", pid=pid, pgid=pid, start_ticks=ticks, what=lease_what
        )

    def wait_exit(self, timeout_s: float) -> int | None:
        """Wait for the process to end on its own (a crash hook); its return code, or None."""
        if self._proc is None:
            return None
        try:
            code = self._proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            return None
        self._finish()
        return code

    def kill(self) -> int | None:
        """SIGKILL the whole process group, as a crash would; its return code.

        Returns once every process of the group is gone, not just the leader: a multi-process
        server's workers (gunicorn, uvicorn --workers) may still hold the listening socket a
        few milliseconds after their master died.
        """
        if self._proc is None:
            return None
        self.ready = False
        pgid = self._proc.pid
        if self._proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGKILL)
        code = self._proc.wait(10)
        # Members that outlived the leader (or were forked as it died) get the signal again.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)
        if not wait_group_gone(pgid, GROUP_GONE_S):
            # The lease stays open: the janitor ends what is left of the group.
            raise HarnessError(
                f"the {self.what}'s process group {pgid} still has live processes {GROUP_GONE_S:g} s after "
                f"SIGKILL: {', '.join(map(str, live_members(pgid)))}"
            )
        self._finish()
        return code

    def stop(self) -> None:
        """End it: SIGTERM to its group, then SIGKILL after a grace period."""
        if self.running() and self._proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._proc.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._proc.wait(5)
        # Ending the run: a straggler of the group is the janitor's (its lease says so), not
        # a reason to fail a run whose verdicts are already written.
        with contextlib.suppress(HarnessError):
            self.kill()

    def log_tail(self, chars: int = 2000) -> str:
        if self._log is None or not self._log.exists():
            return ""
        return self._log.read_text(errors="replace")[-chars:]

    def _finish(self) -> None:
        if self._lease is not None:
            code = self._proc.returncode if self._proc else None
            self._leases.release(self._lease, outcome=f"ended (exit {code})")
            self._lease = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()
