"""The one semaphore and shared-memory pair libfaketime's processes of a run share (``FAKETIME_SHARED``).

Without it, every process started under libfaketime creates its own pair, named by its pid
(``/dev/shm/sem.faketime_sem_<pid>``, ``/dev/shm/faketime_shm_<pid>``), and removes it only
when it exits normally: a process killed with SIGKILL — every crash experiment, every stop
that outlives its grace period — leaves both behind, and a later process that happens to get
that pid fails to start under libfaketime ("shm_open failed: File exists", as libfaketime's
own documentation warns: /usr/share/doc/libfaketime). Given ``FAKETIME_SHARED="<semaphore> <shared memory>"``,
a process attaches to that pair instead of creating its own; the lab creates one pair per run,
named by a token of its own, and removes it when the run ends.

A confined process has a private ``/dev/shm`` and cannot see the lab's pair: libfaketime then
makes one in its private ``/dev/shm``, which goes with the sandbox.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

# POSIX shared memory lives here on Linux; the names carry a random token of the run.
SHM = Path("/dev/shm")  # noqa: S108  # nosec B108
TICKS_BYTES = 8  # libfaketime 0.9.10 keeps one 64-bit counter in its shared memory


@dataclass(frozen=True)
class SharedPair:
    """A named POSIX semaphore (value 1) and an 8-byte shared memory, readable and writable by all."""

    semaphore: str  # "/acklab_ft_<token>_sem"
    memory: str  # "/acklab_ft_<token>_shm"

    @property
    def value(self) -> str:
        """``FAKETIME_SHARED``'s value."""
        return f"{self.semaphore} {self.memory}"

    @property
    def files(self) -> tuple[Path, Path]:
        return SHM / f"sem.{self.semaphore[1:]}", SHM / self.memory[1:]

    @classmethod
    def create(cls) -> SharedPair | None:
        """A fresh pair; None where POSIX semaphores cannot be made here (each process then makes its own)."""
        name = f"/acklab_ft_{secrets.token_hex(8)}"
        pair = cls(f"{name}_sem", f"{name}_shm")
        found = ctypes.util.find_library("c")
        if found is None or not SHM.is_dir():
            return None
        try:
            libc = ctypes.CDLL(found, use_errno=True)
            sem_open, sem_close = libc.sem_open, libc.sem_close
        except (OSError, AttributeError):
            return None
        sem_open.restype = ctypes.c_void_p
        sem_open.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_uint, ctypes.c_uint]
        sem_close.argtypes = [ctypes.c_void_p]
        handle = sem_open(pair.semaphore.encode(), os.O_CREAT | os.O_EXCL, 0o666, 1)
        if not handle or handle == ctypes.c_void_p(-1).value:  # SEM_FAILED
            return None
        sem_close(handle)
        semaphore, memory = pair.files
        try:
            descriptor = os.open(memory, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o666)
            try:
                os.ftruncate(descriptor, TICKS_BYTES)
            finally:
                os.close(descriptor)
            # Every user the consumer may run as writes both (the umask took bits off).
            semaphore.chmod(0o666)  # nosec B103 - a counter shared by the run's processes, nothing secret
            memory.chmod(0o666)  # nosec B103
        except OSError:
            pair.remove()
            return None
        return pair

    def remove(self) -> None:
        for path in self.files:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
