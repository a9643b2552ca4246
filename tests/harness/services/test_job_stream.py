"""A job's life from the broker's command stream: MONITOR lines parsed, grouped by client (a script's
commands are its caller's) and told as steps — without a Redis (the lines are fed as Redis writes them)."""

from __future__ import annotations

import pytest

from acklab.harness.services.job_stream import JobStream, parse
from acklab.harness.services.resp import RespError, _parse, encode

WORKERS = {51001: "worker 1", 51002: "worker 2"}


def stream() -> JobStream:
    return JobStream(6379, ("celery", "unacked", "dramatiq:__acks__.*", "dramatiq:orders"), WORKERS.get)


def test_a_monitor_line_is_read_as_the_server_writes_it() -> None:
    line = r'1700000000.123456 [0 127.0.0.1:51001] "HSET" "unacked" "tag-1" "{\"body\": \"x\"}"'
    assert parse(line) == ("127.0.0.1:51001", ["HSET", "unacked", "tag-1", '{\\"body\\": \\"x\\"}'])
    assert parse('1700000000.1 [0 lua] "sadd" "k" "v"') == ("lua", ["sadd", "k", "v"])
    assert parse("OK") is None


@pytest.mark.parametrize(
    ("lines", "steps"),
    [
        # the handler's enqueue; Celery's take and ack; its restore of a job past the visibility timeout
        (['[0 127.0.0.1:50000] "LPUSH" "celery" "{}"'], [("enqueued", None)]),
        (
            [
                '[0 127.0.0.1:51001] "MULTI"',
                '[0 127.0.0.1:51001] "ZADD" "unacked_index" "1" "t"',
                '[0 127.0.0.1:51001] "HSET" "unacked" "t" "{}"',
            ],
            [("taken", "worker 1")],
        ),
        (['[0 127.0.0.1:51001] "HDEL" "unacked" "t"'], [("acknowledged", "worker 1")]),
        (
            ['[0 127.0.0.1:51002] "HDEL" "unacked" "t"', '[0 127.0.0.1:51002] "RPUSH" "celery" "{}"'],
            [("requeued", "worker 2")],
        ),
        # Dramatiq: a script that requeues a dead worker's message and takes it, its commands the caller's
        (
            [
                '[0 127.0.0.1:51002] "EVALSHA" "sha" "1" "dramatiq" "fetch"',
                '[0 lua] "rpush" "dramatiq:orders" "m1"',
                '[0 lua] "sadd" "dramatiq:__acks__.w2.orders" "m1"',
            ],
            [("requeued", "worker 2"), ("taken", "worker 2")],
        ),
        # two clients: two groups
        (
            ['[0 127.0.0.1:50000] "LPUSH" "celery" "{}"', '[0 127.0.0.1:51001] "HSET" "unacked" "t" "{}"'],
            [("enqueued", None), ("taken", "worker 1")],
        ),
        # a blocking pop takes nothing when it is issued; reads and other keys are no step
        (['[0 127.0.0.1:51001] "BRPOP" "celery" "1"'], []),
        (['[0 127.0.0.1:51001] "LLEN" "celery"', '[0 127.0.0.1:51001] "SET" "other" "1"'], []),
    ],
)
def test_each_group_of_writes_to_a_queue_key_is_one_step(
    lines: list[str], steps: list[tuple[str, str | None]]
) -> None:
    watched = stream()
    for line in lines:
        watched.feed(f"1700000000.000001 {line}", 1.0)
    watched.flush()
    assert [(s.step, s.worker) for s in watched.since(0.0)] == steps


def test_behind_a_bridge_a_group_is_told_by_its_commands_alone() -> None:
    watched = JobStream(6379, ("celery", "unacked"), WORKERS.get, knows_workers=False)
    for line in (
        '[0 127.0.0.1:51001] "LPUSH" "celery" "{}"',
        '[0 127.0.0.1:50000] "HSET" "unacked" "t" "{}"',
        '[0 127.0.0.1:51002] "HDEL" "unacked" "t"',
    ):
        watched.feed(f"1700000000.000001 {line}", 1.0)
    watched.flush()
    # No address is the machine's: nobody is named, not even a port a worker holds on the host.
    assert [(s.step, s.worker) for s in watched.since(0.0)] == [
        ("enqueued", None),
        ("taken", None),
        ("acknowledged", None),
    ]


def test_resp_replies_are_read_whole_and_bounded() -> None:
    assert encode("SET", "k", 1) == b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\n1\r\n"
    reply = b"*2\r\n$1\r\na\r\n:5\r\n"
    assert _parse(reply + b"+NEXT\r\n", 0) == ([b"a", 5], len(reply))
    assert _parse(b"$5\r\nab", 0)[1] == 0  # a bulk string not read whole yet
    error, _ = _parse(b"-OOM command not allowed\r\n", 0)
    assert isinstance(error, RespError)
    with pytest.raises(RespError, match="at most"):
        _parse(b"$999999999999\r\n", 0)
