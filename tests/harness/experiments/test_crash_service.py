"""crash-after-commit on a target spec with ``command:``: the lab starts, kills and restarts the service."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

from acklab.evidence.exitcodes import ExitCode
from acklab.harness.errors import SpecError, TargetUnreachable
from acklab.harness.ports import free_port
from tests.harness.conftest import SECRET, SECRET_ENV, target_doc, write_spec
from tests.harness.experiments.conftest import experiment, trials

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


def service_spec(tmp_path: Path, variant: str, *, command: bool = True) -> Path:
    port = free_port()
    db_url = f"sqlite:///{tmp_path / variant}.db"
    doc = target_doc(variant, f"http://127.0.0.1:{port}/hooks", db_url)
    if command:
        doc["command"] = {
            "argv": [
                sys.executable,
                "-m",
                "tests.harness.crash_service",
                *("--variant", variant, "--port", str(port), "--db", db_url),
                *("--after-commit-ms", "300"),
            ],
            "env": {"PYTHONPATH": str(ROOT)},
            "ready_timeout_s": 20,
        }
    return write_spec(tmp_path / f"{variant}.yaml", doc)


@pytest.fixture(autouse=True)
def _secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SECRET_ENV, SECRET)


def _landed(trial: dict) -> None:
    params = trial["parameters"]
    assert params["crash_landed"] is True, params
    assert params["strike_outcomes"][-1] == "killed-after-commit-before-response"
    assert params["crash_exit_code"] == -9


def test_a_service_without_dedupe_fails_crash_after_commit(run_lab, tmp_path):
    result = run_lab(str(service_spec(tmp_path, "no-dedupe")), "crash-after-commit", trials=2)
    assert result.exit_code == ExitCode.VERDICT_FAILED, experiment(result, "crash-after-commit")
    violations = experiment(result, "crash-after-commit")["violations"]
    assert {(v["invariant"], v["observed"]) for v in violations} == {("at-most-once-effect", 2)}
    for trial in trials(result, "crash-after-commit"):
        _landed(trial)
        struck = [d for d in trial["deliveries"] if d["fault"] == "crash-after-commit"][-1]
        assert struck["status"] is None  # the answer never came


def test_a_receipt_service_passes_crash_after_commit(run_lab, tmp_path):
    result = run_lab(str(service_spec(tmp_path, "receipt")), "crash-after-commit", trials=2)
    assert result.exit_code == ExitCode.OK, experiment(result, "crash-after-commit")
    for trial in trials(result, "crash-after-commit"):
        _landed(trial)
        assert trial["parameters"]["restarts"] >= 1
        assert trial["deliveries"][-1]["status"] == 200


def test_crash_after_commit_without_command_is_refused_naming_command(run_lab, tmp_path):
    with pytest.raises(SpecError, match="command:") as refused:
        run_lab(str(service_spec(tmp_path, "receipt", command=False)), "crash-after-commit")
    assert refused.value.exit_code == ExitCode.INVALID_INPUT


def test_crash_mid_transaction_is_refused_for_a_service(run_lab, tmp_path):
    with pytest.raises(SpecError, match="open") as refused:
        run_lab(str(service_spec(tmp_path, "receipt")), "crash-mid-transaction")
    assert refused.value.exit_code == ExitCode.INVALID_INPUT


def test_a_command_that_never_serves_is_a_lab_error(run_lab, tmp_path):
    spec = service_spec(tmp_path, "receipt")
    spec.write_text(spec.read_text().replace("- -m\n", "- -c\n    - raise SystemExit(3)\n    - -m\n", 1))
    with pytest.raises(TargetUnreachable, match="exited") as failed:
        run_lab(str(spec), "crash-after-commit")
    assert failed.value.exit_code == ExitCode.LAB_ERROR


def test_a_service_that_does_not_come_back_is_an_error_and_no_later_trial_is_blamed(run_lab, tmp_path):
    spec = service_spec(tmp_path, "receipt")
    doc = yaml.safe_load(spec.read_text())
    doc["command"]["argv"] += ["--once", str(tmp_path / "started.lock")]
    write_spec(spec, doc)
    result = run_lab(str(spec), "crash-after-commit", trials=2)
    assert result.exit_code == ExitCode.LAB_ERROR
    first, second = trials(result, "crash-after-commit")
    assert first["verdict"] == "error"
    assert "did not come back" in first["error"]
    assert "refusing to start" in first["error"]  # the service's own words, from its log
    assert second["verdict"] == "error"
    assert second["deliveries"] == []  # nothing was sent into a service that was not there
    assert second["error"].startswith("not run: the lab's own service is down")
    assert "check the endpoint" not in first["error"] + second["error"]


def test_an_http_probe_served_by_the_killed_service_is_read_after_its_restart(run_lab, tmp_path):
    spec = service_spec(tmp_path, "receipt")
    doc = yaml.safe_load(spec.read_text())
    doc["effects"] = {
        "http": {"url": doc["endpoint"].replace("/hooks", "/effects/{{event_id}}"), "json_path": "count"}
    }
    write_spec(spec, doc)
    result = run_lab(str(spec), "crash-after-commit", trials=1)
    assert result.exit_code == ExitCode.OK, experiment(result, "crash-after-commit")
    [trial] = trials(result, "crash-after-commit")
    _landed(trial)
    notes = [(o["note"], o["effects"]) for o in trial["observations"]]
    assert ("after-crash", 1) in notes  # read once the service was back
