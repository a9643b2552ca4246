"""services: and topology: in a target spec, the balancer, and each provider's retry policy —
checked before anything is started (nothing here starts a process)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from acklab.harness.engine.runner import choose_experiments
from acklab.harness.errors import SpecError
from acklab.harness.services import check
from acklab.harness.targets import resolve_target
from acklab.harness.targets.spec import load_target
from acklab.harness.wire.balancer import RECORD, REPLICA, Balancer
from acklab.harness.wire.providers import PROFILES, SCHEMES
from acklab.harness.wire.records import DeliveryRecord
from acklab.harness.wire.retry_policy import RetryPolicy, span
from tests.harness.conftest import SECRET, SECRET_ENV, target_doc, write_spec


def spec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **changes: Any) -> Path:
    monkeypatch.setenv(SECRET_ENV, SECRET)
    doc = target_doc("shop", "http://127.0.0.1:{{port}}/hooks", "sqlite:///{{scratch}}/shop.db")
    doc["command"] = {"argv": [sys.executable, "-m", "shop", "--port", "{{port}}"]}
    doc.update(changes)
    return write_spec(tmp_path / "shop.yaml", doc)


def test_services_and_replicas_are_read_from_the_spec(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    command = {
        "argv": [sys.executable, "-m", "shop", "--port", "{{port}}"],
        "env": {"REDIS_URL": "{{redis_url}}"},
    }
    target = load_target(
        spec(tmp_path, monkeypatch, services=["redis"], topology={"replicas": 3}, command=command),
        allow_remote=False,
    )
    assert (target.fleet.names, target.capabilities().replicas) == (("redis",), 3)
    assert target.unbound is not None
    assert "redis_url" in target.unbound.names


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"services": ["memcached"]}, "services"),
        ({"topology": {"replicas": 0}}, "topology"),
        ({"command": {"argv": ["shop"], "env": {"R": "{{redis_url}}"}}}, "services: does not name redis"),
    ],
)
def test_a_fleet_the_lab_cannot_start_is_refused_before_anything_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, changes: dict[str, Any], message: str
) -> None:
    with pytest.raises(SpecError, match=message):
        load_target(spec(tmp_path, monkeypatch, **changes), allow_remote=False)


def test_replicas_need_a_command_the_lab_starts_on_ports_of_their_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(SECRET_ENV, SECRET)
    doc = {
        **target_doc("shop", "http://127.0.0.1:9/hooks", f"sqlite:///{tmp_path}/x.db"),
        "topology": {"replicas": 2},
    }
    with pytest.raises(SpecError, match=r"topology\.replicas is 2: the lab starts command: that many times"):
        load_target(write_spec(tmp_path / "shop.yaml", doc), allow_remote=False)


def test_experiments_beyond_one_process_say_why_they_do_not_apply(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = load_target(spec(tmp_path, monkeypatch), allow_remote=False)
    chosen, skipped = choose_experiments(target, ("replica-duplicates", "restart-redelivery"))
    assert [e.name for e in chosen] == ["restart-redelivery"]
    assert "set topology: {replicas: 2}" in skipped["replica-duplicates"]
    # The fixture runs in the lab's own process: it cannot be restarted or shifted; named, it is refused.
    with pytest.raises(SpecError, match="restarts only a consumer it starts"):
        choose_experiments(resolve_target("fixture:live"), ("restart-redelivery",))


@pytest.mark.faketime
def test_a_static_binary_s_clock_cannot_be_shifted_and_its_clock_experiments_are_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = load_target(
        spec(tmp_path, monkeypatch, command={"argv": ["/sbin/ldconfig", "{{port}}"]}), allow_remote=False
    )
    chosen, skipped = choose_experiments(
        target, ("restart-redelivery", "late-redelivery", "provider-retries")
    )
    assert [e.name for e in chosen] == ["restart-redelivery"]
    assert "static binary" in skipped["late-redelivery"]
    assert "static binary" in skipped["provider-retries"]


def test_the_balancer_spreads_round_robin_and_honours_a_pinned_replica() -> None:
    asyncio.run(_balance())


async def _balance() -> None:
    seen: list[int] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(int(request.url.port or 0))
        assert request.headers["host"] == "127.0.0.1:9000"  # passed on as the sender wrote it
        return httpx.Response(200)

    balancer = Balancer(
        httpx.MockTransport(answer), [("127.0.0.1", 9000), ("127.0.0.1", 9001), ("127.0.0.1", 9002)]
    )
    records = []
    async with httpx.AsyncClient(transport=balancer) as client:
        for pinned in (None, None, None, None, 2):
            record = DeliveryRecord(0, "evt", 1, "original", "none", {}, b"")
            extensions: dict[str, Any] = {RECORD: record} | ({REPLICA: pinned} if pinned is not None else {})
            await client.send(
                client.build_request("POST", "http://127.0.0.1:9000/hooks", extensions=extensions)
            )
            records.append(record.replica)
    assert seen == [9000, 9001, 9002, 9000, 9002]
    assert records == [0, 1, 2, 0, 2]


def test_every_provider_has_a_retry_policy_and_says_what_it_does_when_it_gives_up() -> None:
    for scheme in SCHEMES:  # one record per provider: its retry policy is in its profile
        assert isinstance(PROFILES[scheme].retry, RetryPolicy)
        assert PROFILES[scheme].retry.gives_up
    stripe = PROFILES["stripe"]
    assert stripe.retry.window_s == stripe.schedule_s[-1] == 3 * 86_400
    assert stripe.retry.consequence(stripe.short_name).endswith("after 3 days of failed deliveries")
    assert PROFILES["github"].retry.automatic is False
    assert PROFILES["github"].retry.keeps_delivery_id is True
    slack = PROFILES["slack"].retry
    assert slack.headers(1) == {}
    assert slack.headers(3, "error") == {"X-Slack-Retry-Num": "2", "X-Slack-Retry-Reason": "http_error"}
    assert PROFILES["stripe"].retry.headers(2) == {}
    assert [span(s) for s in (259_200, 14_400, 361, 60)] == ["3 days", "4 hours", "361 seconds", "1 minute"]


def test_services_are_named_and_their_placeholders_need_them() -> None:
    check(["redis"], frozenset({"redis_url", "port"}), source="shop.yaml")
    with pytest.raises(SpecError, match="got 'memcached'; the lab starts redis"):
        check(["memcached"], frozenset(), source="shop.yaml")
    with pytest.raises(SpecError, match="named twice"):
        check(["redis", "redis"], frozenset(), source="shop.yaml")
    with pytest.raises(SpecError, match=r"\{\{redis_url\}\} is used, but services: does not name redis"):
        check([], frozenset({"redis_url"}), source="shop.yaml")
