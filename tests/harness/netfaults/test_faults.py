"""Faults are small frozen values that check themselves and round-trip through their record."""

from __future__ import annotations

import dataclasses

import pytest

from acklab.evidence.exitcodes import ExitCode
from acklab.harness.netfaults import (
    FAULT_TYPES,
    Bandwidth,
    Down,
    FaultProxy,
    Latency,
    LimitData,
    NetFaultError,
    ResetPeer,
    Slicer,
    SlowClose,
    Timeout,
    fault_from_record,
)

EVERY_FAULT = [
    Latency(ms=200, jitter=50),
    Bandwidth(rate=64, stream="upstream"),
    SlowClose(delay=300),
    Timeout(timeout=0),
    ResetPeer(timeout=100),
    Slicer(average_size=8, size_variation=3, delay=10),
    LimitData(bytes=1024),
    Down(),
]


def test_every_toxiproxy_toxic_has_a_fault():
    assert set(FAULT_TYPES) == {
        "latency",
        "bandwidth",
        "slow_close",
        "timeout",
        "reset_peer",
        "slicer",
        "limit_data",
        "down",
    }


@pytest.mark.parametrize("fault", EVERY_FAULT, ids=lambda f: f.toxic)
def test_a_fault_round_trips_through_its_record(fault):
    assert fault_from_record(fault.record()) == fault


@pytest.mark.parametrize("fault", EVERY_FAULT, ids=lambda f: f.toxic)
def test_faults_are_frozen(fault):
    with pytest.raises(dataclasses.FrozenInstanceError):
        fault.stream = "both"


def test_the_record_reads_like_a_toxiproxy_toxic():
    assert Latency(ms=200, jitter=50).record() == {
        "type": "latency",
        "stream": "downstream",
        "attributes": {"ms": 200, "jitter": 50},
    }


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: Latency(ms=-1), "latency: got ms=-1; expected a whole number >= 0"),
        (lambda: Latency(ms=1.5), "latency: got ms=1.5; expected a whole number >= 0"),  # type: ignore[arg-type]
        (lambda: Bandwidth(rate=10, stream="sideways"), "bandwidth: got stream='sideways'"),  # type: ignore[arg-type]
        (lambda: Slicer(average_size=4, size_variation=4), "expected average_size >= 1 and size_variation"),
    ],
)
def test_a_bad_value_is_invalid_input_and_says_what_was_expected(build, message):
    with pytest.raises(NetFaultError, match=message) as caught:
        build()
    assert caught.value.exit_code == ExitCode.INVALID_INPUT


def test_an_unknown_record_names_the_known_types():
    with pytest.raises(NetFaultError, match="got fault type 'jitterbug'; expected one of bandwidth, down"):
        fault_from_record({"type": "jitterbug"})


def test_streams_select_directions():
    assert Latency(ms=1).acts_on("downstream")
    assert not Latency(ms=1).acts_on("upstream")
    assert Timeout().acts_on("upstream")
    assert Timeout().acts_on("downstream")


def test_the_proxy_listens_on_loopback_only():
    with pytest.raises(NetFaultError, match="loopback only") as caught:
        FaultProxy(upstream=("127.0.0.1", 5432), listen_host="0.0.0.0")
    assert caught.value.exit_code == ExitCode.REFUSED
