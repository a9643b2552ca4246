"""The consumer's clock: libfaketime under a process, the offset moved at run time, forward only."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from acklab.harness.errors import HarnessError
from acklab.harness.procs.clock import ShiftedClock, mapped_in, static_reason

pytestmark = pytest.mark.faketime

DAY = 86_400


def test_a_running_process_sees_its_clock_move_when_the_lab_moves_it(shifted_clock: ShiftedClock) -> None:
    # One long-lived process reads its clock twice: the shift lands without a restart.
    script = "import sys, time; print(time.time(), flush=True); sys.stdin.readline(); print(time.time(), flush=True)"
    env = {**os.environ, **shifted_clock.env()}
    with subprocess.Popen(
        [sys.executable, "-c", script], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as proc:
        assert proc.stdin is not None
        assert proc.stdout is not None
        before = float(proc.stdout.readline())
        assert mapped_in(proc.pid) is True
        shifted_clock.shift_to(3 * DAY)
        proc.stdin.write("\n")
        proc.stdin.flush()
        after = float(proc.stdout.readline())
    assert abs(before - time.time()) < 5
    assert abs(after - (time.time() + 3 * DAY)) < 5
    reading = shifted_clock.reading()
    assert reading.offset_s == 3 * DAY
    assert reading.landed(), reading
    assert shifted_clock.now() - time.time() == pytest.approx(3 * DAY, abs=1)


def test_the_clock_never_goes_back(shifted_clock: ShiftedClock) -> None:
    shifted_clock.shift_to(60)
    with pytest.raises(HarnessError, match="never goes back"):
        shifted_clock.shift_to(30)
    assert shifted_clock.offset_s == 60
    assert shifted_clock.rate_file.read_text() == "+60\n"


def test_a_process_without_the_preload_is_not_shifted(shifted_clock: ShiftedClock) -> None:
    with subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE
    ) as proc:
        assert mapped_in(proc.pid) is False
        proc.communicate(b"")


def test_the_clock_directory_is_leased_and_removed(tmp_path: Path) -> None:
    clock = ShiftedClock.create()
    directory = clock.directory
    assert (directory / "faketime.rc").stat().st_mode & 0o777 == 0o644
    clock.close()
    assert not directory.exists()


def test_a_static_binary_is_named_before_anything_starts(tmp_path: Path) -> None:
    # A dynamic program, a script and a program that is not there say nothing.
    assert static_reason(sys.executable) is None
    script = tmp_path / "serve.sh"
    script.write_text("#!/bin/sh\nexec true\n")
    assert static_reason(str(script)) is None
    assert static_reason("no-such-program-acklab") is None
    # glibc's ldconfig is linked statically (static-pie) on every Debian: no PT_INTERP.
    assert "static binary" in (static_reason("/sbin/ldconfig") or "")
