"""The run's Redis as a queue broker, as the queue experiments strike it: depths of lists, hashes and
globbed keys, writes refused and counted per command, pending pops answered, a restart that keeps
what it held."""

from __future__ import annotations

import time

import pytest

from acklab.harness.services.broker import Broker, newly_refused
from acklab.harness.services.redis import RedisServer
from acklab.harness.services.resp import Connection, RespError

pytestmark = pytest.mark.redis


def test_the_queue_depth_counts_every_kind_of_key_and_globs(redis_server: RedisServer) -> None:
    broker = Broker(redis_server.port, ("celery", "unacked", "dramatiq:__acks__.*"))
    assert broker.depth() == 0
    with Connection(redis_server.port) as conn:
        conn.command("LPUSH", "celery", "a", "b")
        conn.command("HSET", "unacked", "t1", "x")
        conn.command("SADD", "dramatiq:__acks__.w1.orders", "m1")
        conn.command("SADD", "dramatiq:__acks__.w2.orders", "m2", "m3")
        assert broker.depths() == {
            "celery": 2,
            "unacked": 1,
            "dramatiq:__acks__.w1.orders": 1,
            "dramatiq:__acks__.w2.orders": 2,
        }
        conn.command("FLUSHALL")
    assert broker.depth() == 0


def test_a_broker_refusing_writes_names_the_refused_commands_and_keeps_serving_reads(
    redis_server: RedisServer,
) -> None:
    broker = Broker(redis_server.port, ("celery",))
    before = broker.refused()
    broker.refuse_writes()
    try:
        with Connection(redis_server.port) as conn:
            with pytest.raises(RespError, match="OOM"):
                conn.command("LPUSH", "celery", "job")
            assert conn.command("LLEN", "celery") == 0
    finally:
        broker.accept_writes()
    assert newly_refused(before, broker.refused()) == {"lpush": 1}
    with Connection(redis_server.port) as conn:
        assert conn.command("LPUSH", "celery", "job") == 1
        conn.command("DEL", "celery")


def test_pending_pops_are_answered_empty_and_a_restart_keeps_the_queue(redis_server: RedisServer) -> None:
    broker = Broker(redis_server.port, ("celery",))
    blocked = Connection(redis_server.port, timeout_s=5)
    blocked._sock.sendall(b"*3\r\n$5\r\nBRPOP\r\n$6\r\ncelery\r\n$1\r\n0\r\n")
    # The server takes the pop as blocked a moment after it was sent: a moment that a loaded
    # machine stretches; a pop never unblocked fails below, when the read times out.
    deadline = time.monotonic() + 30
    while broker.unblock_all() == 0 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert blocked.read() is None  # the pop returned nothing: it cannot take the next job
    blocked.close()
    with Connection(redis_server.port) as conn:
        conn.command("LPUSH", "celery", "job")
    before = broker.run_id()
    redis_server.restart_persisted()
    assert broker.run_id() != before
    assert broker.depths() == {"celery": 1}


def test_a_queue_that_never_drained_names_celerys_restore_lock_when_a_killed_worker_left_it_held(
    redis_server: RedisServer,
) -> None:
    import asyncio
    from typing import Any, cast

    from acklab.harness.targets.queues import QueueControl

    broker = Broker(redis_server.port, ("celery", "unacked"))
    queue = QueueControl(
        broker=broker,
        server=redis_server,
        workers=cast(Any, None),  # wait_drained reads the broker alone
        stream=cast(Any, None),
        drained_within_s=0.2,
    )
    with Connection(redis_server.port) as conn:
        conn.command("HSET", "unacked", "t1", "a task a killed worker took")
        why = asyncio.run(queue.wait_drained(0.05))
        assert why is not None
        assert why.startswith("the queue never drained within queues.drained_within_s=0.2 s")
        assert "(still held: unacked: 1)" in why
        assert "restore lock" not in why
        # kombu's lock (redis-py's Lock: a token under the key, with an expiry) held by the dead worker.
        conn.command("SET", "unacked_mutex", "token-of-the-killed-worker", "PX", "300000")
        why = asyncio.run(queue.wait_drained(0.05))
        assert why is not None
        assert "Celery's restore lock (unacked_mutex) is held for another 300 s" in why
        assert "unacked_mutex_expire" in why
        conn.command("FLUSHALL")


def _popped_by(redis_server: RedisServer, broker: Broker) -> Connection:
    """A connection whose ``BRPOP`` took the one job pushed after it blocked, and that has not
    read the answer or spoken since (a worker between its pop and its next command)."""
    worker = Connection(redis_server.port, timeout_s=5)
    worker._sock.sendall(b"*3\r\n$5\r\nBRPOP\r\n$6\r\ncelery\r\n$1\r\n0\r\n")
    deadline = time.monotonic() + 30
    while not any("b" in c.get("flags", "") for c in broker.clients()) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert broker.popped() == []  # blocked in its pop: it holds nothing yet
    with Connection(redis_server.port) as conn:
        conn.command("LPUSH", "celery", "job")
    return worker


def test_a_client_a_blocking_pop_answered_holds_its_job_until_it_speaks_again(
    redis_server: RedisServer,
) -> None:
    broker = Broker(redis_server.port, ("celery", "unacked"))
    worker = _popped_by(redis_server, broker)
    try:
        assert broker.depths() == {}  # the job is in no key...
        assert broker.popped() == [f"127.0.0.1:{worker.local_port}"]  # ... but in the worker's hands
        assert worker.read() == [b"celery", b"job"]
        worker.command("HSET", "unacked", "t1", "job")  # Celery's worker records what it took
        assert broker.popped() == []
        assert broker.depths() == {"unacked": 1}
    finally:
        worker.close()
        with Connection(redis_server.port) as conn:
            conn.command("FLUSHALL")


@pytest.mark.parametrize("whose", ["worker", "handler"])
def test_a_queue_is_not_drained_while_a_worker_holds_a_job_it_popped(
    redis_server: RedisServer, whose
) -> None:
    import asyncio
    from typing import Any, cast

    from acklab.harness.services.job_stream import JobStream
    from acklab.harness.targets.queues import IN_HAND, QueueControl

    broker = Broker(redis_server.port, ("celery", "unacked"))
    worker = _popped_by(redis_server, broker)
    owners = {worker.local_port: "worker 1.1"} if whose == "worker" else {}
    queue = QueueControl(
        broker=broker,
        server=redis_server,
        workers=cast(Any, None),  # wait_drained reads the broker and asks the stream whose a client is
        stream=JobStream(redis_server.port, broker.keys, owners.get),
        drained_within_s=0.3,
    )
    try:
        why = asyncio.run(queue.wait_drained(0.05))
        if whose == "worker":
            assert why is not None
            assert f"(still held: {IN_HAND}: 1)" in why
        else:  # a client the lab cannot tie to a worker (the handler's own) holds no job of the queue
            assert why is None
        worker.read()
        worker.command("PING")
        assert asyncio.run(queue.wait_drained(0.05)) is None
    finally:
        worker.close()
        with Connection(redis_server.port) as conn:
            conn.command("FLUSHALL")
