"""crash-after-commit and crash-mid-transaction: the fixture process is killed with SIGKILL."""

from __future__ import annotations

import tempfile

import pytest

from acklab.evidence.documents.verdicts import EXPERIMENT_NAMES
from acklab.evidence.exitcodes import ExitCode
from acklab.harness.errors import SpecError
from acklab.harness.runtime import runtime_dir
from tests.harness.experiments.conftest import experiment, trials

pytestmark = pytest.mark.slow


def test_the_unsafe_handler_fails_crash_after_commit(run_lab):
    result = run_lab("fixture:unsafe", "crash-after-commit")
    assert result.exit_code == ExitCode.VERDICT_FAILED
    [violation] = experiment(result, "crash-after-commit")["violations"]
    assert (violation["invariant"], violation["observed"]) == ("at-most-once-effect", 2)
    [trial] = trials(result, "crash-after-commit")
    assert trial["parameters"]["crash_exit_code"] == -9
    assert trial["parameters"]["crash_landed"] is True
    first = trial["deliveries"][0]
    assert (first["fault"], first["status"]) == ("crash-after-commit", None)  # no answer ever came


def test_the_live_handler_passes_crash_after_commit_and_the_run_leaves_nothing_in_tmp(
    run_lab, tmp_path, monkeypatch
):
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))  # where the run makes its directories
    result = run_lab("fixture:live", "crash-after-commit", trials=2)
    assert result.exit_code == ExitCode.OK, experiment(result, "crash-after-commit")
    for trial in trials(result, "crash-after-commit"):
        assert trial["parameters"]["crash_landed"] is True
        assert trial["deliveries"][-1]["status"] == 200
    # The fixture's database and the logs of every process it started (and restarted) went with
    # the run: a user's /tmp does not fill up with one directory per crash trial.
    # (The lab's own pid-file directory stays: it is this user's, one for every run.)
    assert result.bundle.is_dir()
    assert [p.name for p in scratch.iterdir() if p != runtime_dir(create=False)] == []


@pytest.mark.parametrize("handler", ["live", "unsafe"])
def test_a_kill_mid_transaction_leaves_nothing_half_written(run_lab, handler):
    result = run_lab(f"fixture:{handler}", "crash-mid-transaction")
    assert result.exit_code == ExitCode.OK, experiment(result, "crash-mid-transaction")
    [trial] = trials(result, "crash-mid-transaction")
    assert trial["parameters"]["transaction_seen_open"] is True
    assert trial["parameters"]["left_half_written"] is False
    assert trial["parameters"]["crash_exit_code"] == -9


@pytest.mark.postgres
def test_crash_after_commit_on_postgresql(run_lab, pg_url):
    assert run_lab("fixture:unsafe", "crash-after-commit", db=pg_url).exit_code == ExitCode.VERDICT_FAILED
    assert run_lab("fixture:live", "crash-after-commit", db=pg_url, seed=8).exit_code == ExitCode.OK


def test_crash_experiments_need_a_target_the_lab_runs(run_lab, tmp_path):
    spec = tmp_path / "t.yaml"
    spec.write_text(
        "apiVersion: acklab/v1\nkind: target\nname: t\nendpoint: http://127.0.0.1:9/hooks\n"
        "signing: {scheme: none}\nevent: {id: '{{event_id}}', type: order.paid}\n"
        "effects: {http: {url: 'http://127.0.0.1:9/effects/{{event_id}}', json_path: count}}\n"
    )
    with pytest.raises(SpecError, match="runs as a process"):
        run_lab(str(spec), "crash-after-commit")


def test_the_deeper_experiments_do_not_run_by_default():
    from acklab.harness.experiments import by_name

    deeper = {name for name in EXPERIMENT_NAMES if name.startswith(("crash-", "db-"))}
    assert len(deeper) == 6
    # Beyond one process (docs/fleet.md) runs only when named too: replicas, restarts, a moved clock.
    fleet = {"replica-duplicates", "restart-redelivery", "late-redelivery", "provider-retries"}
    # the provider talking back and signatures as providers send them are named only too
    talks_back = {"fetch-lag", "fetch-stale", "fetch-throttled", "provider-echo", "effect-failure"}
    signatures = {"key-rotation", "raw-bytes", "clock-skew"}
    # behind a queue (docs/queues.md): a worker, a broker, a job struck, only when named
    queued = {
        "worker-crash-after-effect",
        "visibility-timeout",
        "late-duplicate-job",
        "broker-restart",
        "enqueue-lost",
    }
    names = [e.name for e in by_name([])]
    # every other one does, beyond one event too (skipped, with the reason, where the target
    # lacks the section), in the order of the one list of names
    named_only = deeper | fleet | talks_back | signatures | queued
    assert names == [name for name in EXPERIMENT_NAMES if name not in named_only]
    assert len(names) == 9
