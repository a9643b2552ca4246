"""The progress display on a real terminal: `acklab run` under a pty draws rich's live bars
(cursor hidden, lines redrawn, erased when done) and its summary table in colour; piped, the
same run writes one plain line per trial instead. Both read from a real process."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
ACKLAB = [sys.executable, "-c", "import sys; from acklab.cli import main; main(sys.argv[1:])"]
ROWS, COLUMNS = 40, 120
HIDE_CURSOR, SHOW_CURSOR, ERASE_LINE = b"\x1b[?25l", b"\x1b[?25h", b"\x1b[2K"
SGR = re.compile(rb"\x1b\[[0-9;]*m")


# rich reads these as overrides; here the terminal must be detected (and measured) by itself
OVERRIDES = ("NO_COLOR", "FORCE_COLOR", "COLUMNS", "LINES", "TTY_COMPATIBLE", "TTY_INTERACTIVE")


def terminal_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in OVERRIDES}
    env["TERM"] = "xterm-256color"
    return env


def run_in_pty(argv: list[str], *, cwd: Path, timeout: float = 180) -> tuple[int, bytes]:
    """Run `argv` with a pty of ROWS x COLUMNS as its terminal; return its exit code and every byte."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLUMNS, 0, 0))
    process = subprocess.Popen(
        argv,
        stdin=follower,
        stdout=follower,
        stderr=follower,
        cwd=cwd,
        env=terminal_env(),
        start_new_session=True,
    )
    os.close(follower)
    received = bytearray()
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([leader], [], [], 0.5)
            if not ready:
                if process.poll() is not None:
                    break
                continue
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: every writer of the terminal has closed it
                break
            if not chunk:
                break
            received += chunk
        else:
            process.kill()
            pytest.fail(f"acklab did not finish within {timeout}s under a pty: {bytes(received[-2000:])!r}")
        return process.wait(timeout=30), bytes(received)
    finally:
        os.close(leader)


RUN = ["run", "--target", "fixture:live", "--experiment", "lost-ack", "--trials", "3", "--seed", "5"]


def test_a_terminal_gets_live_bars_and_a_coloured_table(tmp_path: Path) -> None:
    code, raw = run_in_pty([*ACKLAB, *RUN, "--out", str(tmp_path / "out")], cwd=tmp_path)
    assert code == 0, raw[-3000:]
    assert HIDE_CURSOR in raw
    assert SHOW_CURSOR in raw
    assert raw.index(HIDE_CURSOR) < raw.rindex(SHOW_CURSOR)
    assert ERASE_LINE in raw  # the bars were redrawn in place and erased at the end (transient)
    plain = SGR.sub(b"", raw).decode("utf-8", "replace")
    assert re.search(r"lost-ack\s+━+\s+[0-3]/3", plain), plain[-2000:]  # a bar with its count
    assert "3/3" in plain
    assert "trial lost-ack-0000: pass" not in plain  # the piped transcript is not what a terminal gets
    assert "┏" in plain
    assert "experiment" in plain
    assert "verdict: pass (complete)" in plain
    assert b"\x1b[32m" in raw or b"\x1b[38;5;2m" in raw  # "pass" in green
    widest = max(len(line) for line in SGR.sub(b"", raw).decode("utf-8", "replace").splitlines())
    assert widest <= COLUMNS  # drawn for the terminal's own width


def test_a_pipe_gets_one_plain_line_per_trial(tmp_path: Path) -> None:
    done = subprocess.run(
        [*ACKLAB, *RUN, "--out", str(tmp_path / "out")],
        capture_output=True,
        cwd=tmp_path,
        env=terminal_env(),
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert HIDE_CURSOR not in done.stderr
    assert b"\x1b[" not in done.stderr
    lines = done.stderr.decode().splitlines()
    assert [line.strip() for line in lines if line.strip().startswith("trial ")] == [
        f"trial lost-ack-000{n}: pass" for n in range(3)
    ]
    assert "experiment lost-ack: pass (0 violations)" in lines
