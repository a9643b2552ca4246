"""SIGTERM as Ctrl-C, for work that runs outside a run's own loop (a sweep, the repair flow).

A cancelled CI job, or a GitLab Duo step past its timeout, gets SIGTERM; Python's default
ends the process on the spot, leaving worktrees, leased processes and half-written records
behind. Within `sigterm_interrupts()` it raises KeyboardInterrupt instead, which the caller
already handles as an interruption (exit 6). A run's loop installs its own handlers for its
duration (`signal.signal`, noted at once: see `runner._install_interrupts`) and puts this one back after,
passing on a signal it caught too late to act on (`runner._cancel_interrupts`).
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from types import FrameType


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"terminated by signal {signum}")


@contextlib.contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """SIGTERM raises KeyboardInterrupt in the block; outside the main thread, nothing changes."""
    try:
        previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    except ValueError:  # not the main thread: signals stay with the caller
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
