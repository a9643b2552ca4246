"""`acklab serve fixture`: exit codes of the contract, the generated secret, and no secret in logs."""

from __future__ import annotations

import re
import socket
from pathlib import Path

import httpx
import pytest

from acklab.app.settings import Settings
from acklab.cli import main
from tests.app.conftest import SECRET, new_event_id, order_event, standard_headers
from tests.app.servers import serve_in_subprocess


def _exit_code(argv: list[str]) -> int:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    return int(exited.value.code or 0)


@pytest.mark.parametrize(
    ("argv", "code", "named"),
    [
        (["serve", "console"], 2, "console"),
        (["serve", "fixture", "--handler", "safe"], 2, "safe"),
        (["serve", "fixture", "--scheme", "paypal"], 2, "paypal"),
        (["serve", "fixture", "--port", "70000"], 2, "70000"),
        (["serve", "fixture", "--secret", "whsec_not*base64!"], 3, "whsec_"),
        (["serve", "fixture", "--secret", SECRET, "--db", "nonsense"], 3, "nonsense"),
        (["serve", "fixture", "--secret", SECRET, "--db", "mysql://u@h/db"], 3, "mysql"),
        (
            ["serve", "fixture", "--secret", SECRET, "--db", "sqlite:////nonexistent/dir/x.db"],
            4,
            "nonexistent",
        ),
    ],
)
def test_bad_values_are_refused_with_the_contract_exit_code(
    argv: list[str], code: int, named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _exit_code(argv) == code
    err = capsys.readouterr().err
    assert named in err
    assert "not*base64" not in err  # a secret, even a malformed one, is never echoed


def test_an_address_in_use_is_a_lab_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        argv = [
            "serve",
            "fixture",
            "--secret",
            SECRET,
            "--db",
            f"sqlite:///{tmp_path}/x.db",
            "--port",
            str(port),
        ]
        assert _exit_code(argv) == 4
    assert f"127.0.0.1:{port}" in capsys.readouterr().err


def test_the_secret_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACKLAB_WEBHOOK_SECRET", SECRET)
    settings = Settings()
    assert settings.secret is not None
    assert settings.secret.get_secret_value() == SECRET
    assert SECRET not in repr(settings)


@pytest.mark.slow
def test_a_generated_secret_is_printed_once_and_works(tmp_path: Path) -> None:
    env = {"ACKLAB_WEBHOOK_SECRET": ""}
    with serve_in_subprocess("--db", f"sqlite:///{tmp_path}/x.db", env=env) as served:
        printed = re.findall(r"whsec_[A-Za-z0-9+/=]+", "".join(served.log))
        assert len(printed) == 1
        event_id = new_event_id()
        body = order_event(event_id)
        headers = standard_headers(event_id, body, secret=printed[0])
        assert httpx.post(f"{served.url}/webhooks/orders", content=body, headers=headers).status_code == 200
        served.process.terminate()
        served.process.wait(10)
    assert "".join(served.log).count(printed[0]) == 1


@pytest.mark.slow
def test_secrets_and_signatures_never_reach_the_log(tmp_path: Path) -> None:
    event_id = new_event_id()
    body = order_event(event_id)
    headers = standard_headers(event_id, body)
    with serve_in_subprocess(
        "--db", f"sqlite:///{tmp_path}/x.db", env={"ACKLAB_WEBHOOK_SECRET": SECRET}
    ) as served:
        assert httpx.post(f"{served.url}/webhooks/orders", content=body, headers=headers).status_code == 200
        forged = {**headers, "webhook-signature": "v1,AAAA"}
        assert httpx.post(f"{served.url}/webhooks/orders", content=body, headers=forged).status_code == 401
        served.process.terminate()
        served.process.wait(10)
    log = "".join(served.log)
    assert "POST /webhooks/orders" in log  # the access log is on ...
    assert SECRET not in log  # ... and holds neither the secret nor any signature
    assert headers["webhook-signature"].split(",")[1] not in log
