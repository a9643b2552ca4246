"""`acklab init` against two services it never saw (different schemas, different providers): one
running under gunicorn (--url), one an app object (--app, served by init on a database of its
own). The spec it writes validates, and then finds each service's bug: `acklab run` exits 1 on
the buggy one, 0 on its correct twin."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from acklab.harness.init.examples import PROVIDERS as INIT_PROVIDERS
from acklab.harness.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
STRIPE_SECRET = "whsec_init_test_stripe_secret_0123456789"
GITLAB_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

pytestmark = pytest.mark.slow


def environment(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "CI_"))}
    # The service's `python` is the project's (here: this venv), found on the job's PATH.
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = str(ROOT)
    env.update(extra)
    return env


def acklab(
    cwd: Path, *argv: str, env: dict[str, str], timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "acklab"), *argv],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        stdin=subprocess.DEVNULL,
    )


class Gunicorn:
    """The payments shop under gunicorn (two uvicorn workers), started apart from the lab."""

    def __init__(self, env: dict[str, str], port: int) -> None:
        self.env, self.port = env, port
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, **extra: str) -> None:
        self.proc = subprocess.Popen(
            [str(BIN / "python"), "-m", "gunicorn", "-k", "uvicorn.workers.UvicornWorker", "-w", "2",
             "-b", f"127.0.0.1:{self.port}", "tests.init.payments_shop:app"],
            env={**self.env, **extra},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )  # fmt: skip
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.1)
        raise AssertionError("gunicorn did not start")

    def stop(self) -> None:
        if self.proc is not None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(30)
            self.proc = None


@pytest.fixture
def payments(tmp_path: Path) -> Iterator[tuple[Path, dict[str, str], Gunicorn]]:
    project = tmp_path / "payments"
    project.mkdir()
    env = environment(PAYMENTS_DB=str(project / "payments.db"), STRIPE_WEBHOOK_SECRET=STRIPE_SECRET)
    server = Gunicorn(env, free_port())
    try:
        yield project, env, server
    finally:
        server.stop()


def test_init_finds_the_payments_table_of_a_running_service_and_the_spec_finds_its_bug(payments):
    project, env, server = payments
    server.start()  # the correct twin: it claims each event id
    url = f"http://127.0.0.1:{server.port}/stripe/webhook"
    done = acklab(
        project, "init", "--url", url, "--provider", "stripe", "--event", "payment_intent.succeeded",
        "--db", f"sqlite:///{project}/payments.db", "--secret-env", "STRIPE_WEBHOOK_SECRET",
        "--name", "payments", "--yes", env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    # What it saw, printed: the effect table and the bookkeeping one, told apart.
    assert "after the event: payments: 0 -> 1 rows (+1)" in done.stderr
    assert "after the duplicate: no table changed" in done.stderr
    assert (
        "candidate stripe_events.id (holds the event id): its name says it records deliveries" in done.stderr
    )
    spec_path = project / "acklab" / "payments.target.yaml"
    spec = yaml.safe_load(spec_path.read_text())
    assert (
        spec["effects"]["sql"]["count"] == "SELECT count(*) FROM payments WHERE intent = 'pi_' || :event_id"
    )
    assert spec["effects"]["sql"]["state"].startswith("SELECT amount, currency FROM payments")
    assert spec["event"]["data"]["object"]["id"] == "pi_{{event_id}}"
    assert spec["event"]["data"]["object"]["object"] == "payment_intent"  # Stripe's own example
    assert spec["expect"] == {"max_effects": 1, "conflict_status": [409, 422]}  # it answered 409
    assert "conflict" not in spec  # the documented default: the amount changes
    assert STRIPE_SECRET not in spec_path.read_text()
    assert {p.name for p in (project / "acklab").iterdir()} == {
        "payments.target.yaml",
        "payments.gitlab-ci.yml",
    }
    assert (project / "tests" / "test_payments_webhooks.py").is_file()

    validated = acklab(project, "validate", str(spec_path), env=env)
    assert validated.returncode == 0, validated.stdout + validated.stderr
    passed = acklab(project, "run", "--target", str(spec_path), "--trials", "1", env=env)
    assert passed.returncode == 0, passed.stderr[-3000:]

    server.stop()
    server.start(PAYMENTS_DEDUPE="none")  # the buggy twin: every delivery pays
    failed = acklab(project, "run", "--target", str(spec_path), "--trials", "1", "--json", env=env)
    assert failed.returncode == 1, failed.stderr[-3000:]
    assert "at-most-once-effect" in failed.stdout

    # The pytest test it wrote runs the spec against the same running service (webhook_lab.run).
    tested = subprocess.run(
        [str(BIN / "python"), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", "--acklab-trials",
         "1", "tests/test_payments_webhooks.py", "-k", "lost-ack and not reset or replay"],
        cwd=project, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert tested.returncode == 1, tested.stdout[-3000:]
    assert (
        "test_payments_webhook[lost-ack] FAILED" in tested.stdout
        or "FAILED tests/test_payments_webhooks.py::test_payments_webhook[lost-ack]" in tested.stdout
    )
    assert "1 failed, 1 passed" in tested.stdout  # lost-ack fails (pays twice), replay passes


def test_init_serves_an_app_object_finds_its_builds_table_and_the_spec_finds_its_bug(tmp_path):
    project = tmp_path / "deploys"
    project.mkdir()
    env = environment(DEPLOYS_DB=str(project / "deploys.db"), GITLAB_WEBHOOK_SECRET=GITLAB_SECRET)
    done = acklab(
        project, "init", "--app", "tests.init.deploys:app", "--path", "/hooks/gitlab", "--provider", "gitlab",
        "--db", f"sqlite:///{project}/deploys.db", "--secret-env", "GITLAB_WEBHOOK_SECRET", "--yes",
        env={**env, "DEPLOYS_DEDUPE": "none"},  # init meets the buggy one: the table grows again
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "it grew again on the duplicate" in done.stderr
    spec_path = project / "acklab" / "deploys.target.yaml"
    spec = yaml.safe_load(spec_path.read_text())
    assert spec["name"] == "deploys"  # the project folder's name
    assert spec["endpoint"] == "http://127.0.0.1:{{port}}/hooks/gitlab"
    assert spec["command"]["argv"][:4] == ["python", "-m", "uvicorn", "tests.init.deploys:app"]
    # Served on a database of its own: the variable the app reads, in the run's scratch directory.
    assert spec["command"]["env"]["DEPLOYS_DB"] == "{{scratch}}/deploys.db"
    assert spec["effects"]["sql"]["url"] == "sqlite:///{{scratch}}/deploys.db"
    assert not (project / "deploys.db").exists()  # the developer's own database: never written
    assert spec["effects"]["sql"]["count"] == "SELECT count(*) FROM builds WHERE sha = :event_id"
    assert spec["event"]["object_kind"] == "push"
    assert spec["event"]["checkout_sha"] == "{{event_id}}"
    assert spec["expect"]["conflict"] == "ignore"  # it acknowledged the conflicting body

    assert acklab(project, "validate", str(spec_path), env=env).returncode == 0
    correct = acklab(project, "run", "--target", str(spec_path), "--trials", "1", env=env)
    assert correct.returncode == 0, correct.stderr[-3000:]
    buggy = acklab(
        project, "run", "--target", str(spec_path), "--trials", "1", env={**env, "DEPLOYS_DEDUPE": "none"}
    )
    assert buggy.returncode == 1, buggy.stderr[-3000:]

    # The pytest test it wrote runs the spec's service (its own port and database), one test per experiment.
    pytest_env = {**env, "DEPLOYS_DEDUPE": "none"}
    tested = subprocess.run(
        [str(BIN / "python"), "-m", "pytest", "-q", "-p", "no:cacheprovider", "--acklab-trials", "1",
         "-p", "no:xdist", "tests/test_deploys_webhooks.py"],
        cwd=project, env=pytest_env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert tested.returncode == 1, tested.stdout[-3000:]
    assert (
        "test_deploys_webhook[lost-ack] FAILED" in tested.stdout
        or "FAILED tests/test_deploys_webhooks.py::test_deploys_webhook[lost-ack]" in tested.stdout
    )
    assert (project / ".acklab" / ".gitignore").is_file()


def test_without_a_terminal_to_ask_on_and_without_yes_nothing_is_written(tmp_path):
    project = tmp_path / "deploys"
    project.mkdir()
    env = environment(DEPLOYS_DB=str(project / "deploys.db"), GITLAB_WEBHOOK_SECRET=GITLAB_SECRET)
    done = acklab(
        project, "init", "--app", "tests.init.deploys:app", "--path", "/hooks/gitlab", "--provider", "gitlab",
        "--db", f"sqlite:///{project}/deploys.db", "--secret-env", "GITLAB_WEBHOOK_SECRET", env=env,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "pass --yes to take the proposal above" in done.stderr
    assert "candidate builds.sha" in done.stderr  # it says what it found before it refuses
    assert [p.name for p in project.iterdir()] == []  # not even the app's database: it had its own


def test_a_service_that_refuses_the_signature_is_named_and_nothing_is_written(tmp_path):
    project = tmp_path / "deploys"
    project.mkdir()
    env = environment(DEPLOYS_DB=str(project / "deploys.db"), GITLAB_WEBHOOK_SECRET=GITLAB_SECRET)
    wrong = {**env, "WRONG_SECRET": "whsec_" + "QUJD" * 8}  # not the secret the service verifies with
    done = acklab(
        project, "init", "--app", "tests.init.deploys:app", "--path", "/hooks/gitlab", "--provider", "gitlab",
        "--db", f"sqlite:///{project}/deploys.db", "--secret-env", "WRONG_SECRET", "--yes", "--wait", "2",
        env=wrong,
    )  # fmt: skip
    assert done.returncode == 4, done.stderr
    assert "it answered 401 to the signed event: check --secret-env" in done.stderr


@pytest.mark.parametrize("provider", INIT_PROVIDERS)
def test_init_writes_a_valid_spec_for_every_providers_example(tmp_path, provider):
    """Whatever the provider: its published example, signed as it signs, reaches a consumer that
    verifies as the fixture does; init finds the effect and writes a spec validate accepts."""
    project = tmp_path / provider
    project.mkdir()
    env = environment(ANY_DB=str(project / "any.db"), ANY_SCHEME=provider, ANY_SECRET=GITLAB_SECRET)
    done = acklab(
        project, "init", "--app", "tests.init.any_provider:app", "--path", "/hooks", "--provider", provider,
        "--db", f"sqlite:///{project}/any.db", "--secret-env", "ANY_SECRET", "--name", "shop", "--yes",
        env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    spec_path = project / "acklab" / "shop.target.yaml"
    spec = yaml.safe_load(spec_path.read_text())
    assert spec["signing"] == {"scheme": provider, "secret": "env:ANY_SECRET"}
    assert spec["effects"]["sql"]["count"] == "SELECT count(*) FROM orders WHERE event_key = :event_id"
    assert 409 in spec["expect"]["conflict_status"]  # the consumer refused the conflicting body
    checked = acklab(project, "validate", str(spec_path), env=env)
    assert checked.returncode == 0, checked.stdout + checked.stderr
