"""Services the lab starts for a consumer: Redis on a port and a directory of the run's own,
under the run's shifted clock, where a TTL expires as days go by."""

from __future__ import annotations

from pathlib import Path

import pytest

from acklab.harness.errors import TargetUnreachable
from acklab.harness.ports import free_port
from acklab.harness.procs.clock import ShiftedClock, mapped_in
from acklab.harness.services import Services
from acklab.harness.services.redis import RedisServer, ask

pytestmark = pytest.mark.redis


def test_redis_answers_and_forgets_nothing_across_runs(redis_server: RedisServer) -> None:
    assert ask(redis_server.port, "SET", "k", "v", "NX", "EX", "300").startswith(b"+OK")
    assert ask(redis_server.port, "SET", "k", "v", "NX", "EX", "300").startswith(b"$-1")  # NX: kept
    assert redis_server.url == f"redis://127.0.0.1:{redis_server.port}/0"
    # Nothing persisted: its directory holds no dump after a stop.
    redis_server.stop()
    assert not list(redis_server.directory.glob("*.rdb"))


def test_a_ttl_expires_on_redis_s_shifted_clock(shifted_clock: ShiftedClock) -> None:
    services = Services.allocate(["redis"], free_port)
    try:
        services.start(clock=shifted_clock)
        port = services.ports["redis"]
        (server,) = services.servers.values()
        assert server.pid is not None
        assert mapped_in(server.pid) is True
        assert ask(port, "SET", "evt_1", "seen", "NX", "EX", "300").startswith(b"+OK")
        before = services.clocks()["redis"]
        shifted_clock.shift_to(301)
        after = services.clocks()["redis"]
        assert before is not None
        assert after is not None
        assert after - before == pytest.approx(301, abs=3)
        # The key set five minutes "ago" is gone: a second SET NX takes it again.
        assert ask(port, "SET", "evt_1", "seen", "NX", "EX", "300").startswith(b"+OK")
        assert services.values == {"redis_url": f"redis://127.0.0.1:{port}/0"}
    finally:
        services.stop()
    assert not services.servers


def test_a_redis_that_cannot_start_says_why(tmp_path: Path) -> None:
    taken = RedisServer(free_port(), tmp_path, tmp_path)
    taken.start()
    try:
        second = RedisServer(taken.port, tmp_path / "again", tmp_path)
        (tmp_path / "again").mkdir()
        with pytest.raises(TargetUnreachable, match="something already accepts connections"):
            second.start()
    finally:
        taken.stop()
