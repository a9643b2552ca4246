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
from acklab.harness.ports import free_port

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


def test_acklab_console_on_a_busy_port_names_the_fix(sample_evidence, capsys):
    """Another listener on --port: exit 5 (a listener refused), with the --port to pass."""
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        with pytest.raises(SystemExit) as done:
            main(["console", "--evidence", str(sample_evidence), "--port", str(port)])
    assert done.value.code == ExitCode.REFUSED
    err = capsys.readouterr().err
    assert f"port {port} on 127.0.0.1 is already in use" in err
    assert "--port 0" in err
