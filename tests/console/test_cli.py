"""`acklab console` as a user starts it: a real process on a real port."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from acklab.cli import main
from acklab.evidence.exitcodes import ExitCode
from tests.console.conftest import free_port

ACKLAB = Path(sys.executable).parent / "acklab"


@pytest.mark.slow
def test_acklab_console_serves_the_evidence_read_only(sample_evidence):
    port = free_port()
    process = subprocess.Popen(
        [str(ACKLAB), "console", "--evidence", str(sample_evidence), "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                response = httpx.get(f"http://127.0.0.1:{port}/", timeout=2)
                break
            except httpx.TransportError:
                assert process.poll() is None, process.stderr.read() if process.stderr else ""
                assert time.monotonic() < deadline, "the console did not start"
                time.sleep(0.1)
        assert response.status_code == 200
        assert "Latest verdict per target" in response.text
        assert httpx.post(f"http://127.0.0.1:{port}/", timeout=2).status_code == 405
    finally:
        process.terminate()
        _, stderr = process.communicate(timeout=10)  # also closes the pipe
    assert f"http://127.0.0.1:{port}/" in stderr


def test_acklab_console_without_evidence_is_an_input_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as done:
        main(["console", "--evidence", str(tmp_path / "missing")])
    assert done.value.code == ExitCode.INVALID_INPUT
    assert "does not exist" in capsys.readouterr().err
