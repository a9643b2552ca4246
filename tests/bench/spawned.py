"""Runs for `bench.runs.each` in the tests: module-level functions a spawned worker imports by
name. A module of their own, importing nothing of the bench or the lab, so that each worker
starts in a tenth of the time the test module's imports would cost it."""

from __future__ import annotations

import os
import time
from pathlib import Path


def whose(n: int) -> tuple[int, int]:
    """A run: its number squared and the process that ran it."""
    return n * n, os.getpid()


def together(case: tuple[Path, int]) -> int:
    """A run that ends only once another run is under way at the same time (or after 60 s)."""
    folder, n = case
    (folder / f"{n}-{os.getpid()}").touch()
    deadline = time.monotonic() + 60
    while len({p.name.split("-")[1] for p in folder.iterdir()}) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    return os.getpid()
