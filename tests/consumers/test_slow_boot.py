"""Services that boot slowly, and events that are never acknowledged.

The services listen at once but answer 503 for 3 s after every start (the lab starts them
from a target spec's ``command:``, in their own folder, and restarts them after a crash).
No verdict may come from a service that was not there yet; a proven violation exits 1 even
beside errors; a handler that never acknowledges fails ``eventually-acknowledged``.
"""

from __future__ import annotations

import pytest
import yaml

from acklab.harness.errors import SpecError, TargetUnreachable
from tests.consumers import scenarios
from tests.consumers.test_verdict_trust import trials

pytestmark = pytest.mark.slow


def test_a_slow_booting_consumer_with_a_duplicate_bug_fails_with_no_trial_in_error(tmp_path):
    scenario = scenarios.slow_boot(tmp_path, "no-dedupe", f"sqlite:///{tmp_path}/site.db")
    result = scenario.run(tmp_path / "out")
    assert scenario.mismatches(result) == []
    assert result.exit_code == 1
    for entry in result.run["experiments"]:
        for trial in trials(result, entry["name"]):
            assert trial["verdict"] == "fail", trial["error"]
            assert trial["error"] is None, trial["error"]
            # Every delivery was answered by a ready service: none landed in the boot window.
            assert all(
                d.get("service_ready") is not False or d["fault"] != "none" for d in trial["deliveries"]
            )
    [crash] = trials(result, "crash-after-commit")
    assert crash["parameters"]["restarts"] >= 1


def test_its_correct_twin_passes_everything(tmp_path, pg_url):
    # Readiness said explicitly this time: GET /health answers 200 once booted.
    scenario = scenarios.slow_boot(tmp_path, "receipt", pg_url, ready=True)
    result = scenario.run(tmp_path / "out")
    assert scenario.mismatches(result) == []
    assert result.exit_code == 0
    assert all(e["fault_landed"] == e["trials"] for e in result.run["experiments"])


def test_a_consumer_that_answers_500_after_committing_fails_twice_over(tmp_path):
    scenario = scenarios.slow_boot(tmp_path, "fails-after-commit", f"sqlite:///{tmp_path}/site.db")
    result = scenario.run(tmp_path / "out")
    assert result.exit_code == 1
    (entry,) = result.run["experiments"]
    invariants = {v["invariant"] for v in entry["violations"]}
    assert invariants == {"at-most-once-effect", "eventually-acknowledged"}
    unacked = next(v for v in entry["violations"] if v["invariant"] == "eventually-acknowledged")
    assert unacked["observed"] == "500, 500, 500, 500"
    # lost-ack could never lose an acknowledgement it never got: said beside the verdict.
    assert "lost-ack fires only" not in (entry["reason"] or "")
    assert "only an acknowledgement can be lost" in entry["reason"]


def test_a_service_that_never_becomes_ready_is_a_lab_error_naming_readiness(tmp_path):
    scenario = scenarios.slow_boot(tmp_path, "receipt", f"sqlite:///{tmp_path}/site.db", boot_s=30)
    doc = yaml.safe_load(scenario.spec.read_text())
    doc["command"]["ready_timeout_s"] = 1.5
    scenarios.write(scenario.spec, doc)
    with pytest.raises(TargetUnreachable, match="never became ready") as failed:
        scenario.run(tmp_path / "out")
    assert "503" in str(failed.value)
    assert "ready_timeout_s" in str(failed.value)


def test_the_command_runs_in_its_cwd_relative_to_the_spec(tmp_path):
    scenario = scenarios.slow_boot(tmp_path, "receipt", f"sqlite:///{tmp_path}/site.db", boot_s=0.2)
    doc = yaml.safe_load(scenario.spec.read_text())
    doc["command"]["cwd"] = "no-such-folder"
    scenarios.write(scenario.spec, doc)
    with pytest.raises(SpecError, match=r"command\.cwd"):
        scenario.run(tmp_path / "out")
    # Without its folder the service finds no slow_boot.json: the log tail says why it exited.
    del doc["command"]["cwd"]
    scenarios.write(scenario.spec, doc)
    with pytest.raises(TargetUnreachable, match="exited") as failed:
        scenario.run(tmp_path / "out")
    assert "slow_boot.json" in str(failed.value)
