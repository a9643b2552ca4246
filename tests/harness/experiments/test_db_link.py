"""db-latency, db-reset, db-blackhole: the fixture's link to PostgreSQL breaks during a delivery."""

from __future__ import annotations

import pytest

from acklab.evidence.exitcodes import ExitCode
from acklab.harness.errors import SpecError
from tests.harness.experiments.conftest import experiment, trials

pytestmark = [pytest.mark.postgres, pytest.mark.slow]


def test_the_unsafe_handler_fails_db_reset_when_the_commit_answer_is_lost(run_lab, pg_url):
    result = run_lab("fixture:unsafe", "db-reset", db=pg_url)  # trial 0 is the ack-lost strike
    assert result.exit_code == ExitCode.VERDICT_FAILED
    [violation] = experiment(result, "db-reset")["violations"]
    assert violation["invariant"] == "at-most-once-effect"
    [trial] = trials(result, "db-reset")
    assert trial["parameters"]["strike"] == "ack-lost"
    assert trial["parameters"]["strike_landed"] is True
    assert [d["status"] for d in trial["deliveries"]] == [503, 200]  # 5xx, never 2xx, then the retry
    assert [(o["note"], o["effects"]) for o in trial["observations"]] == [
        ("before", 0),
        ("after-fault", 1),  # committed, though the handler never heard so
        ("final", 2),
        ("late", 2),  # the re-read at the end of the run
    ]


@pytest.mark.parametrize("name", ["db-reset", "db-blackhole"])
def test_the_live_handler_passes_every_strike_and_reconnects_by_itself(run_lab, pg_url, name):
    result = run_lab("fixture:live", name, trials=3, db=pg_url)
    assert result.exit_code == ExitCode.OK, experiment(result, name)
    records = trials(result, name)
    assert [t["parameters"]["strike"] for t in records] == ["ack-lost", "commit-lost", "before-the-handler"]
    for trial in records:
        assert trial["parameters"]["strike_landed"] is True
        first, *retries = trial["deliveries"]
        assert first["status"] == 503  # could not commit (or could not hear the commit): 5xx
        assert retries[-1]["status"] == 200  # the same fixture instance, reconnected
        kinds = [e["kind"] for e in trial["parameters"]["proxy_events"]]
        assert kinds[0] == "injected"
        assert kinds[-2:] == ["lifted", "healthy-verified"]


def test_the_live_handler_passes_db_latency_with_the_sender_retrying_into_it(run_lab, pg_url):
    result = run_lab("fixture:live", "db-latency", trials=2, db=pg_url)
    assert result.exit_code == ExitCode.OK, experiment(result, "db-latency")
    for trial in trials(result, "db-latency"):
        original = next(d for d in trial["deliveries"] if d["kind"] == "original")
        assert original["sender_status"] is None  # the sender gave up on the slow handler ...
        assert original["status"] == 200  # ... which still finished
        assert trial["parameters"]["measured_latency_ms"] >= 40  # at least one delayed chunk


def test_the_unsafe_handler_fails_db_latency(run_lab, pg_url):
    result = run_lab("fixture:unsafe", "db-latency", db=pg_url)
    assert result.exit_code == ExitCode.VERDICT_FAILED


def test_database_link_faults_need_postgresql(run_lab):
    with pytest.raises(SpecError, match="pass --db postgresql") as caught:
        run_lab("fixture:live", "db-blackhole")
    assert caught.value.exit_code == ExitCode.INVALID_INPUT


def test_the_proxy_is_leased_and_released_in_the_journal(run_lab, pg_url, tmp_path):
    from acklab.evidence.journal import Journal

    result = run_lab("fixture:live", "db-reset", db=pg_url)
    with Journal(tmp_path / "out" / "journal.sqlite") as journal:
        leases = [
            (e.name.split(":")[0], e.status) for e in journal.history(result.run_id) if e.kind == "lease"
        ]
    assert leases == [("proxy", "acquired"), ("proxy", "released")]
