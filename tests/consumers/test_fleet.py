"""Beyond one process: consumers the lab runs as replicas, restarts between deliveries, and shifts
in time. One run each here; the 20-run reliability figures are the bench's (bench/fleet.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from acklab.harness.engine.results import RunResult
from tests.consumers import fleet_scenarios
from tests.consumers.fleet_scenarios import FLEET

pytestmark = [pytest.mark.slow, pytest.mark.faketime]


def trials(result: RunResult, experiment: str) -> list[dict[str, Any]]:
    return [
        json.loads(p.read_text()) for p in sorted((result.bundle / "trials").glob(f"{experiment}-*.json"))
    ]


def test_an_in_memory_lru_passes_every_single_process_experiment_and_forgets_at_a_deploy(
    tmp_path: Path,
) -> None:
    scenario = fleet_scenarios.lru_single(tmp_path)
    result = scenario.run(tmp_path / "out")
    assert scenario.mismatches(result) == []
    (trial,) = trials(result, "restart-redelivery")
    assert trial["fault"]["landed"] is True
    (restart,) = trial["parameters"]["restarts"]
    assert set(restart["pids_before"]).isdisjoint(restart["pids_after"])
    # The restart is on the trial's timeline, between the lost acknowledgement and the retry.
    notes = [o["note"] for o in trial["observations"]]
    assert notes.index("commit-confirmation") < notes.index("after-restart") < notes.index("final")


def test_replicas_see_through_an_in_memory_dedupe_and_not_through_a_unique_key(
    tmp_path: Path, pg_url: str
) -> None:
    lru = fleet_scenarios.fleet_orders(
        tmp_path, "lru", ("replica-duplicates",), {"replica-duplicates": "fail"}, replicas=2, db_url=pg_url
    )
    result = lru.run(tmp_path / "lru")
    assert lru.mismatches(result) == []
    (trial,) = trials(result, "replica-duplicates")
    # Which replica answered each delivery is recorded; the pair went to two of them.
    assert {d["replica"] for d in trial["deliveries"]} == {0, 1}
    assert trial["fault"]["tries"][-1]["facts"]["pair_replicas"] == [0, 1]


@pytest.mark.redis
def test_a_unique_key_passes_every_experiment_beyond_one_process(tmp_path: Path, pg_url: str) -> None:
    scenario = fleet_scenarios.fleet_orders(
        tmp_path, "unique", FLEET, dict.fromkeys(FLEET, "pass"), replicas=2, db_url=pg_url
    )
    result = scenario.run(tmp_path / "out")
    assert scenario.mismatches(result) == []
    assert result.exit_code == 0
    (late,) = trials(result, "late-redelivery")
    clock = late["fault"]["tries"][-1]["facts"]["clock"]
    # Both clocks in the proof: the consumer's side three days ahead of the lab's.
    assert clock["consumer_unix"] - clock["lab_unix"] == pytest.approx(3 * 86_400, abs=5)
    (retries,) = trials(result, "provider-retries")
    assert len(retries["deliveries"]) == 13  # Stripe's schedule, every attempt


@pytest.mark.redis
@pytest.mark.parametrize(("ttl_s", "verdict"), [(300, "fail"), (4 * 86_400, "pass")])
def test_a_redis_ttl_dedupe_forgets_before_stripe_stops_retrying(
    tmp_path: Path, ttl_s: int, verdict: str
) -> None:
    scenario = fleet_scenarios.fleet_orders(
        tmp_path, "redis", ("late-redelivery",), {"late-redelivery": verdict}, replicas=2, ttl_s=ttl_s
    )
    result = scenario.run(tmp_path / "out")
    assert scenario.mismatches(result) == []
    (trial,) = trials(result, "late-redelivery")
    facts = trial["fault"]["tries"][-1]["facts"]
    # Redis ran on the shifted clock too: its TTL expired as it would have.
    assert facts["services_clock_unix"]["redis"] == pytest.approx(facts["clock"]["consumer_unix"], abs=5)


def test_a_github_receiver_remembering_deliveries_for_an_hour_fails_a_next_day_redelivery(
    tmp_path: Path,
) -> None:
    scenario = fleet_scenarios.github_redelivery(tmp_path)
    result = scenario.run(tmp_path / "out")
    assert scenario.mismatches(result) == []
    (trial,) = trials(result, "late-redelivery")
    sent = [d["headers"]["X-GitHub-Delivery"] for d in trial["deliveries"]]
    assert len(sent) == 2
    assert len(set(sent)) == 1  # GitHub's redelivery keeps the delivery id


@pytest.mark.parametrize("mode", ["ignores-retries", "dedupe"])
def test_slack_s_retries_carry_their_number_and_a_consumer_that_ignores_them_posts_twice(
    tmp_path: Path, mode: str
) -> None:
    scenario = fleet_scenarios.slack_events(tmp_path, mode)
    result = scenario.run(tmp_path / "out")
    assert scenario.mismatches(result) == []
    (trial,) = trials(result, "provider-retries")
    retries = [d["headers"].get("X-Slack-Retry-Num") for d in trial["deliveries"]]
    assert retries == [None, "1", "2", "3"]
    assert trial["fault"]["tries"][-1]["facts"]["gives_up"].startswith("Slack stops after 3 retries")


def test_gunicorn_workers_are_one_replica_and_only_a_restart_sees_through_them(tmp_path: Path) -> None:
    chosen = ("replica-duplicates", "restart-redelivery")
    scenario = fleet_scenarios.fleet_orders(
        tmp_path,
        "lru",
        chosen,
        {"replica-duplicates": "skipped", "restart-redelivery": "fail"},
        workers=3,
    )
    result = scenario.run(tmp_path / "out")
    assert scenario.mismatches(result) == []
    skipped = {e["name"]: e for e in result.run["experiments"]}["replica-duplicates"]
    assert "workers inside one process" in skipped["reason"]


@pytest.mark.redis
def test_a_confined_consumer_gets_its_replicas_redis_and_clock_inside_its_sandbox(tmp_path: Path) -> None:
    from acklab.flows.sandbox import choose
    from acklab.harness.engine.runner import RunOptions, run
    from acklab.harness.procs.faketime_shared import SHM

    chosen = ("restart-redelivery", "late-redelivery")
    checkout, spec = fleet_scenarios.confined_orders(tmp_path)
    out = tmp_path / "out"
    before = {p.name for p in SHM.iterdir()}
    result = run(
        RunOptions(
            target=spec.name,
            checkout=checkout,
            experiments=chosen,
            trials=1,
            out=out,
            journal=False,
            confinement=choose(hide=(out.resolve(),)),
        )
    )
    verdicts = {e["name"]: e["verdict"] for e in result.run["experiments"]}
    # Redis keeps the key across the restart; its TTL of five minutes does not last Stripe's three days.
    assert verdicts == {"restart-redelivery": "pass", "late-redelivery": "fail"}
    (late,) = trials(result, "late-redelivery")
    facts = late["fault"]["tries"][-1]["facts"]
    assert late["fault"]["landed"] is True
    # The consumer's own processes (not the sandbox's wrappers) run on the clock, and so does Redis.
    assert facts["consumer_processes"] == facts["libfaketime_mapped"] > 0
    assert facts["services_clock_unix"]["redis"] == pytest.approx(facts["clock"]["consumer_unix"], abs=5)
    # No process left libfaketime's shared memory behind: the run's one pair is gone too.
    assert not [n for n in {p.name for p in SHM.iterdir()} - before if "faketime" in n or "acklab_ft" in n]
