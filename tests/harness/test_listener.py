"""A service the lab did not start: the run records who listens on its endpoint, and refuses (exit 5)
in CI a process outside the job — a server left over from another job answering for this one's —
while on a developer's machine (no CI variable) it attacks it and warns."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from acklab.harness.ports import free_port
from acklab.harness.procs.listener import listener_of

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
SECRET = "whsec_listener_test_stripe_secret_012345"

pytestmark = pytest.mark.slow


def wait_listening(port: int) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"nothing listens on {port}")


def env(tmp_path: Path) -> dict[str, str]:
    """A developer's machine: none of the variables CI sets (whatever runs this suite)."""
    return {
        **{
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("PYTEST_", "CI_")) and k not in ("CI", "GITLAB_CI")
        },
        "PYTHONPATH": str(ROOT),
        "PAYMENTS_DB": str(tmp_path / "payments.db"),
        "STRIPE_WEBHOOK_SECRET": SECRET,
    }


def server_argv(port: int) -> list[str]:
    return [str(BIN / "python"), "-m", "uvicorn", "tests.init.payments_shop:app", "--port", str(port)]


@pytest.fixture
def sibling(tmp_path: Path) -> Iterator[int]:
    """The shop, started by this process (the lab's parent, as a job's shell starts `uvicorn &`)."""
    port = free_port()
    proc = subprocess.Popen(
        server_argv(port), env=env(tmp_path), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        wait_listening(port)
        yield port
    finally:
        proc.terminate()
        proc.wait(30)


@pytest.fixture
def leftover(tmp_path: Path) -> Iterator[tuple[int, int]]:
    """The shop as another job left it: its own session, its parent gone (port, pid)."""
    port = free_port()
    pidfile = tmp_path / "leftover.pid"
    launcher = (
        "import os, subprocess, sys\n"
        f"p = subprocess.Popen({server_argv(port)!r}, start_new_session=True,\n"
        "                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
        f"open({str(pidfile)!r}, 'w').write(str(p.pid))\n"
    )
    subprocess.run(
        [sys.executable, "-c", launcher], env=env(tmp_path), check=True, timeout=30
    )  # then it exits
    pid = int(pidfile.read_text())
    try:
        wait_listening(port)
        yield port, pid
    finally:
        os.killpg(pid, signal.SIGTERM)


def spec(tmp_path: Path, port: int) -> Path:
    doc = {
        "apiVersion": "acklab/v1",
        "kind": "target",
        "name": "payments",
        "endpoint": f"http://127.0.0.1:{port}/stripe/webhook",
        "signing": {"scheme": "stripe", "secret": "env:STRIPE_WEBHOOK_SECRET"},
        "event": {
            "id": "{{event_id}}",
            "type": "payment_intent.succeeded",
            "data": {"object": {"id": "pi_{{event_id}}", "amount": 1099, "currency": "usd"}},
        },
        "effects": {
            "sql": {
                "url": f"sqlite:///{tmp_path}/payments.db",
                "count": "SELECT count(*) FROM payments WHERE intent = 'pi_' || :event_id",
            }
        },
    }
    path = tmp_path / "payments.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def run(
    tmp_path: Path, port: int, *extra: str, ci: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    argv = ["run", "--target", str(spec(tmp_path, port)), "--experiment", "lost-ack", "--trials", "1"]
    return subprocess.run(
        [str(BIN / "acklab"), *argv, "--out", str(tmp_path / "out"), *extra],
        env={**env(tmp_path), **(ci or {})},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def listener_recorded(tmp_path: Path) -> dict[str, object]:
    [incident] = (tmp_path / "out").glob("*/incidents/*.json")
    return json.loads(incident.read_text())["target"]["listener"]


def run_document(tmp_path: Path) -> dict[str, Any]:
    [found] = (tmp_path / "out").glob("*/run.json")
    return json.loads(found.read_text())


def test_a_server_this_process_started_is_its_own(sibling):
    found = listener_of("127.0.0.1", sibling)
    assert found.in_job is True
    assert found.how == "the lab started it"
    assert found.command is not None
    assert "uvicorn" in found.command


def test_a_sibling_of_the_lab_is_the_jobs_and_the_run_records_it(tmp_path, sibling):
    done = run(tmp_path, sibling)
    assert done.returncode == 0, done.stderr[-3000:]
    recorded = listener_recorded(tmp_path)
    assert recorded["in_job"] is True
    # the shell-and-`&` case: the same process group, or a descendant of the lab's parent
    assert str(recorded["how"]).startswith(("it is in the lab's process group", "it descends from"))
    assert "uvicorn" in str(recorded["command"])


def test_in_ci_a_server_left_over_from_another_job_is_refused_naming_its_pid(tmp_path, leftover):
    port, pid = leftover
    found = listener_of("127.0.0.1", port)
    assert (found.pid, found.in_job) == (pid, False)
    for ci in ({"CI": "true"}, {"GITLAB_CI": "true", "CI_JOB_ID": "4242"}):  # any CI; GitLab's own too
        done = run(tmp_path, port, ci=ci)
        assert done.returncode == 5, done.stderr[-3000:]
        assert f"is served by pid {pid} (" in done.stderr
        assert "left over from another job" in done.stderr
        assert "--allow-foreign-service" in done.stderr
        assert not list((tmp_path / "out").glob("*/incidents/*.json"))  # refused before any traffic

    allowed = run(tmp_path, port, "--allow-foreign-service", ci={"CI": "true"})
    assert allowed.returncode == 0, allowed.stderr[-3000:]
    recorded = listener_recorded(tmp_path)
    assert (recorded["pid"], recorded["in_job"]) == (pid, False)  # allowed, and still recorded
    assert "warnings" not in run_document(tmp_path)  # allowed on purpose: nothing to warn about


def test_on_a_developers_machine_a_service_started_elsewhere_is_attacked_with_a_warning(tmp_path, leftover):
    port, pid = leftover  # as one started in another terminal: outside the lab's job
    done = run(tmp_path, port)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (
        f"acklab: warning: target 'payments': http://127.0.0.1:{port}/stripe/webhook is served by pid {pid}"
        in (done.stderr)
    )
    [warning] = run_document(tmp_path)["warnings"]
    assert "this run did not start" in warning
    assert "In CI (CI=true) it would be refused" in warning
    recorded = listener_recorded(tmp_path)
    assert (recorded["pid"], recorded["in_job"]) == (pid, False)
