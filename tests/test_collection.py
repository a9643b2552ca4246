"""Test collection is deterministic: no test id or parameter depends on the clock, on
randomness drawn at import, or on the hash seed (set order). pytest-xdist workers each collect
the suite and refuse to run when their collections differ, so a clock in an id fails
`make unit` at random."""

from __future__ import annotations

import os
import subprocess  # nosec B404
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent


def _collect(seed: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONHASHSEED": seed}
    argv = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "tests"]
    # argv is this interpreter running pytest on the repository's own tests.
    return subprocess.Popen(  # nosec B603
        argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def _ids(process: subprocess.Popen[str]) -> list[str]:
    out, _ = process.communicate(timeout=240)
    assert process.returncode == 0, out[-4000:]
    ids = [line for line in out.splitlines() if "::" in line]
    assert len(ids) > 100, out[-4000:]
    return ids


def test_two_collections_seconds_apart_give_the_same_ids() -> None:
    # Two collections started 2.5 s apart (so int(time.time()) differs), under different hash
    # seeds, run side by side to keep the test's wall time near one collection's.
    first = _collect("1")
    time.sleep(2.5)
    second = _collect("2")
    a, b = _ids(first), _ids(second)
    differ = sorted(set(a) ^ set(b))
    assert not differ, f"test ids differ between collections: {differ[:20]}"
    assert a == b, "the same ids were collected in a different order"
