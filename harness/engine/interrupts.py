"""Signals and deadlines: a run's own handlers (`install` ... `cancel`), and SIGTERM as Ctrl-C for
work that runs outside a run's loop (`sigterm_interrupts`: a sweep, the repair flow).

A cancelled CI job, or a GitLab Duo step past its timeout, gets SIGTERM; Python's default
ends the process on the spot, leaving worktrees, leased processes and half-written records
behind. Within `sigterm_interrupts()` it raises KeyboardInterrupt instead, which the caller
already handles as an interruption (exit 6). A run's loop installs its own handlers for its
duration (`signal.signal`, noted at once: see `install`) and puts this one back after,
passing on a signal it caught too late to act on (`cancel`).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Iterator
from types import FrameType
from typing import Any


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


def cancel(interrupted: RunSignals) -> None:
    """The run's region is over: its handlers go, the ones it replaced come back, and a signal it
    caught but did not act on (one that came after the run's last look at the flag) goes on to
    them, as it would have reached them had the run never caught it."""
    if not interrupted.active:
        return
    interrupted.active = False
    _put_back(interrupted.previous)
    if interrupted.timer is not None:
        interrupted.timer.cancel()
    if interrupted.signals and not interrupted.honoured:
        interrupted.honoured = True
        signal.raise_signal(interrupted.signals[0])


class RunSignals:
    """What a run's handlers caught (`install`), and what `cancel` puts back and passes on."""

    def __init__(self) -> None:
        self._set = False
        self.deadline = False
        self.timer: asyncio.TimerHandle | None = None
        # The handlers the run replaced (a caller's own, e.g. the repair flow's), put back after.
        self.previous: dict[signal.Signals, Any] = {}
        self.signals: list[int] = []  # those caught, in order
        self.active = True  # False once the run's region is over: a late cancel must not land
        self.honoured = False  # the run stopped for them (exit 6): nothing to pass on

    def set(self) -> None:
        self._set = True

    def is_set(self) -> bool:
        return self._set


def install(deadline_s: float | None = None) -> RunSignals:
    """Ctrl-C, SIGTERM and the run's deadline cancel the run's task; finished trials are on disk.

    The signals get a handler of their own (`signal.signal`), not the loop's
    (`loop.add_signal_handler`): the loop learns of a signal on its next turn only, and one that
    came while the run wrote its bundle (work with no await in it) was read by no turn and lost —
    a SIGTERM'd run then ended as if nothing had come, and the repair flow around it went on to
    publish. The handler notes the signal at once, where the run looks before it reports
    success, and asks the loop to cancel the run's task."""
    flag = RunSignals()
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()

    def cancel() -> None:
        if flag.active and task is not None:
            task.cancel()

    def interrupt() -> None:
        flag.set()
        cancel()

    def caught(signum: int, frame: FrameType | None) -> None:
        # Runs in the main thread between two bytecodes, the loop perhaps in the middle of a turn:
        # call_soon_threadsafe only appends to the loop's queue and wakes it.
        flag.signals.append(signum)
        flag.set()
        loop.call_soon_threadsafe(cancel)

    def deadline() -> None:
        flag.deadline = True
        interrupt()

    if deadline_s is not None:
        flag.timer = loop.call_later(deadline_s, deadline)

    for sig in (signal.SIGINT, signal.SIGTERM):
        # Not the main thread (e.g. a test harness): signals stay with the caller.
        with contextlib.suppress(ValueError, RuntimeError):
            flag.previous[sig] = signal.signal(sig, caught)
    return flag


def raise_if_interrupted(interrupted: RunSignals) -> None:
    """Where the run would report success: a signal caught on the way (its cancel not yet
    delivered, or swallowed by an await that outlived it) stops it here instead."""
    if interrupted.is_set():
        raise asyncio.CancelledError


def _put_back(previous: dict[signal.Signals, Any]) -> None:
    """Put back the handlers the run replaced (a caller's SIGTERM handler, Python's Ctrl-C)."""
    for sig, handler in previous.items():
        with contextlib.suppress(ValueError, RuntimeError):
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
