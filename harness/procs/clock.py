"""The consumer's clock, shifted at run time: libfaketime under every process the lab starts for it.

A dedupe that forgets (a Redis key with a TTL of minutes, a table pruned after a day) only
shows its bug when the provider's retry arrives after it forgot: three days later, for
Stripe. The lab does not wait three days. It starts the consumer's processes and the
services it runs for them (`harness.services`) with Debian's libfaketime preloaded, reading
the offset from a file the lab owns (``FAKETIME_TIMESTAMP_FILE``, re-read on every call:
``FAKETIME_NO_CACHE``), and moves that offset forward when a trial needs the future
(`ShiftedClock.shift_to`). An expiry computed from the consumer's clock — Redis's,
``time.time()`` — sees the days go by. The monotonic clock moves with it, as after a suspend:
Debian's libfaketime 0.9.10 fails an absolute ``clock_nanosleep`` on an unfaked monotonic
clock with EINVAL (``FAKETIME_DONT_FAKE_MONOTONIC``), and Python's ``time.sleep`` is one.
File times are left alone (``NO_FAKE_STAT``).

glibc's ``libc_malloc_debug.so.0`` is preloaded before libfaketime: Debian's ``redis-server``
(jemalloc) hangs under libfaketime alone, jemalloc's initialisation calling ``clock_gettime``
from inside libfaketime's own first call (wolfcw/libfaketime #130, #327 and #478); glibc's
debug malloc in front breaks that recursion.

The offset only ever grows within a run: a clock that went back would lengthen every TTL the
consumer set in the future. The lab's own notion of the provider's time follows it
(`ShiftedClock.now`): a delivery three days later is signed three days later, as the
provider would sign it.

What shows the shift landed (`ShiftedClock.reading`): the lab's clock beside the clock a
witness process reads under the same preload (``date``), and, where the lab can see them,
that libfaketime is mapped in every process of the consumer's group (`mapped_in`). A static
binary loads no preload: `static_reason` names it before anything is started.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import subprocess  # nosec B404
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from acklab.harness.errors import HarnessError
from acklab.harness.procs.faketime_shared import SharedPair
from acklab.harness.procs.leases import Lease, LeaseBook, current_book

LIBFAKETIME = (
    "/usr/lib/*/faketime/libfaketime.so.1",
    "/usr/lib/faketime/libfaketime.so.1",
    "/usr/local/lib/faketime/libfaketime.so.1",
)
MALLOC_DEBUG = ("/usr/lib/*/libc_malloc_debug.so.0", "/lib/*/libc_malloc_debug.so.0")
RATE_FILE = "faketime.rc"
WITNESS = ("date", "+%s.%N")
ELF_MAGIC = b"\x7fELF"
PT_INTERP = 3


class ClockUnavailable(HarnessError):
    """The consumer's clock cannot be shifted here (no libfaketime); experiments that need it are skipped."""


def _first(patterns: tuple[str, ...]) -> str | None:
    for pattern in patterns:
        found = sorted(glob.glob(pattern))
        if found:
            return found[0]
    return None


def libfaketime() -> str | None:
    """Where Debian's libfaketime is installed (None: not installed)."""
    return _first(LIBFAKETIME)


def unavailable() -> str | None:
    """Why no clock can be shifted on this machine (None: it can)."""
    if libfaketime() is None:
        return (
            "the consumer's clock is shifted with libfaketime, which is not installed here "
            "(Debian: apt-get install libfaketime faketime)"
        )
    return None


def static_reason(argv0: str, cwd: Path | None = None) -> str | None:
    """Why the program `argv0` would not see a shifted clock (a static binary, a setuid one), or None.

    A script (``#!``) runs its interpreter, which is dynamic on every system acklab supports;
    a name that cannot be found is left to the start to report.
    """
    path = shutil.which(argv0, path=os.environ.get("PATH")) if os.sep not in argv0 else argv0
    if path is None:
        return None
    candidate = Path(path) if Path(path).is_absolute() or cwd is None else cwd / path
    try:
        with candidate.open("rb") as binary:
            head = binary.read(64)
            if head[:4] != ELF_MAGIC or len(head) < 64:
                return None
            if candidate.stat().st_mode & 0o4000:
                return f"{argv0} is setuid: the dynamic loader ignores LD_PRELOAD for it, so its clock cannot be shifted"
            order: Literal["little", "big"] = "little" if head[5] == 1 else "big"
            phoff = int.from_bytes(head[32:40], order)
            phentsize = int.from_bytes(head[54:56], order)
            phnum = int.from_bytes(head[56:58], order)
            binary.seek(phoff)
            table = binary.read(phentsize * phnum)
    except OSError:
        return None
    for k in range(phnum):
        if int.from_bytes(table[k * phentsize : k * phentsize + 4], order) == PT_INTERP:
            return None
    return f"{argv0} is a static binary: it loads no preloaded library, so libfaketime cannot shift its clock"


def mapped_in(pid: int) -> bool | None:
    """Whether libfaketime is loaded in process `pid` (None: its maps cannot be read)."""
    try:
        maps = Path(f"/proc/{pid}/maps").read_text(errors="replace")
    except OSError:
        return None
    return "libfaketime" in maps


@dataclass(frozen=True)
class ClockReading:
    """Both clocks at one moment: the lab's, and the one a process under the shift reads."""

    lab_unix: float
    consumer_unix: float | None  # None: the witness could not be read
    offset_s: float
    witness: str

    @property
    def skew_s(self) -> float | None:
        """How far the consumer's clock is from the lab's plus the offset (0 when the shift landed)."""
        if self.consumer_unix is None:
            return None
        return self.consumer_unix - (self.lab_unix + self.offset_s)

    def landed(self, tolerance_s: float = 2.0) -> bool:
        skew = self.skew_s
        return skew is not None and abs(skew) <= tolerance_s

    def as_dict(self) -> dict[str, object]:
        return {
            "lab_unix": round(self.lab_unix, 3),
            "consumer_unix": None if self.consumer_unix is None else round(self.consumer_unix, 3),
            "offset_s": self.offset_s,
            "witness": self.witness,
        }


@dataclass
class ShiftedClock:
    """One run's clock for the consumer and its services; `shift_to` moves it, forward only."""

    directory: Path
    library: str
    malloc: str | None
    offset_s: float = 0.0
    shifts: list[tuple[float, float]] = field(default_factory=list)  # (lab unix time, new offset)
    shared: SharedPair | None = field(default=None, repr=False)
    _lease: Lease | None = field(default=None, repr=False)
    _book: LeaseBook | None = field(default=None, repr=False)

    @classmethod
    def create(cls, inside: Path | None = None) -> ShiftedClock:
        """A fresh clock at offset 0 in a leased directory (or in `inside`: a confined place's scratch,
        which its sandbox sees and its lease covers); ClockUnavailable without libfaketime."""
        library = libfaketime()
        if library is None:
            raise ClockUnavailable(unavailable() or "libfaketime is not installed")
        if inside is None:
            directory = Path(tempfile.mkdtemp(prefix="acklab-clock-"))
        else:
            directory = inside / "acklab-clock"
            directory.mkdir()
        # Readable by the consumer's user (a sandbox's too), writable by the lab only.
        directory.chmod(0o755)
        book = current_book()
        clock = cls(directory, library, _first(MALLOC_DEBUG), shared=SharedPair.create(), _book=book)
        if inside is None:
            clock._lease = book.acquire("directory", str(directory), path=str(directory))
        clock._write(0.0)
        return clock

    @property
    def rate_file(self) -> Path:
        return self.directory / RATE_FILE

    def env(self) -> dict[str, str]:
        """What a process needs in its environment to run on this clock."""
        preload = " ".join(p for p in (self.malloc, self.library) if p)
        shared = {"FAKETIME_SHARED": self.shared.value} if self.shared is not None else {}
        return {
            "LD_PRELOAD": preload,
            "FAKETIME_TIMESTAMP_FILE": str(self.rate_file),
            "FAKETIME_NO_CACHE": "1",
            "NO_FAKE_STAT": "1",
            **shared,
        }

    def wrap(self, argv: Sequence[str]) -> tuple[str, ...]:
        """`argv` run on this clock: ``env`` sets the variables for the program itself, so a sandbox's
        wrappers around it (bubblewrap, setpriv) do not load libfaketime — one of them, running as
        root, would make libfaketime's shared semaphore its own, and the program, as the sandbox's
        user, could not open it."""
        return (shutil.which("env") or "/usr/bin/env", *(f"{k}={v}" for k, v in self.env().items()), *argv)

    def started_on(self, pid: int) -> bool | None:
        """Whether process `pid` was started on this clock (its environment names this clock's file);
        None when its environment cannot be read. A sandbox's wrappers around the consumer were not."""
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            return None
        return f"FAKETIME_TIMESTAMP_FILE={self.rate_file}".encode() in environ.split(b"\0")

    def now(self) -> float:
        """The provider's time as the shifted consumer sees it (the lab's clock plus the offset)."""
        return time.time() + self.offset_s

    def shift_to(self, offset_s: float) -> None:
        """Move the consumer's clock `offset_s` seconds ahead of the lab's (never back)."""
        if offset_s < self.offset_s:
            raise HarnessError(
                f"the consumer's clock is {self.offset_s:g} s ahead; it never goes back (asked {offset_s:g} s): "
                "a TTL set in the future would outlive its time"
            )
        self._write(offset_s)
        self.offset_s = offset_s
        self.shifts.append((time.time(), offset_s))

    def _write(self, offset_s: float) -> None:
        # Replaced whole (rename), so a process never reads half a line.
        temporary = self.directory / f".{RATE_FILE}.new"
        temporary.write_text(f"+{offset_s:.0f}\n")
        temporary.chmod(0o644)
        os.replace(temporary, self.rate_file)

    def reading(self) -> ClockReading:
        """The lab's clock and a witness's under the shift, read together."""
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **self.env()}
        lab = time.time()
        try:
            # A fixed argv of the system's own date(1), never a shell.
            done = subprocess.run(  # nosec B603
                list(WITNESS), env=env, capture_output=True, timeout=5, check=False
            )
            consumer = float(done.stdout.decode().strip()) if done.returncode == 0 else None
        except (OSError, ValueError, subprocess.TimeoutExpired):
            consumer = None
        return ClockReading(lab, consumer, self.offset_s, " ".join(WITNESS))

    def close(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)
        if self.shared is not None:
            self.shared.remove()
        if self._lease is not None:
            with contextlib.suppress(OSError):
                (self._book or current_book()).release(self._lease)
            self._lease = None
