"""The race bench's arithmetic: a burst's stages, the floor beside it, each stage's share, the
worst of independent rounds. Plain numbers in, plain numbers out: nothing here is timed."""

from __future__ import annotations

from dataclasses import asdict

import pytest

from acklab.harness.core.bursts import Burst
from acklab.harness.wire.records import DeliveryRecord
from bench.race_sharpness import Round, Stages, detection_figure, floor_ms, shares
from bench.readme import table


def record(seq: int, *, written: float, received: int | None, entered: int | None) -> DeliveryRecord:
    r = DeliveryRecord(seq, "evt_1", 1, "duplicate", "none", {}, b"{}")
    r.written_mono, r.server_received_ns, r.handler_entered_ns = written, received, entered
    return r


def test_a_burst_reports_the_server_spread_between_its_release_and_handler_spreads() -> None:
    records = (
        record(0, written=1.0000, received=1_000_200_000, entered=1_000_500_000),
        record(1, written=1.0001, received=1_000_900_000, entered=1_002_500_000),
        record(2, written=1.0002, received=1_001_200_000, entered=1_001_000_000),
    )
    burst = Burst(records, "last-byte")
    assert burst.release_spread_ms == pytest.approx(0.2)
    assert burst.server_spread_ms == 1.0
    assert burst.handler_spread_ms == 2.0
    facts = burst.facts()
    assert facts["server_spread_ms"] == 1.0
    assert facts["handler_spread_ms"] == 2.0
    assert "server spread 1.000 ms" in burst.describe()
    # A handler that does not say when its server read the request: no server spread, no fact.
    silent = Burst(tuple(record(k, written=1.0, received=None, entered=k * 10**6) for k in range(3)), "none")
    assert silent.server_spread_ms is None
    assert "server_spread_ms" not in silent.facts()


def test_the_floor_is_the_median_intake_once_per_request_after_the_first() -> None:
    # 16 requests one after another: 15 gaps of the median intake, an outlier moves nothing.
    assert floor_ms([0.5] * 15 + [40.0], 16) == 7.5
    assert floor_ms([0.2, 0.4, 0.3], 3) == 0.6


def test_stage_shares_split_the_median_handler_spread() -> None:
    stages = [Stages(0.2, 2.2, 8.0, 7.0), Stages(0.2, 2.2, 8.0, 9.0), Stages(1.0, 5.0, 20.0, 8.0)]
    assert shares(stages) == {"release": 0.025, "server": 0.25, "handler": 0.725}
    # No server-side reading: the server's share is folded into the handoff, never invented.
    assert shares([Stages(0.5, None, 2.0, 1.0)]) == {"release": 0.25, "server": 0.0, "handler": 0.75}


def test_detection_reports_the_worst_of_its_rounds_and_the_median_beside_it() -> None:
    rounds = [
        Round((20, 20), (18, 20), 3.0, 20.0),
        Round((19, 20), (20, 20), 4.0, 22.0),
        Round((20, 20), (15, 20)),
    ]
    figure = detection_figure("detection", rounds, 0.95)
    assert (figure.value, figure.median, figure.rounds, figure.baseline) == (95.0, 100.0, 3, 75.0)
    # 95 % in the worst round reaches the rate, but round 2 lost to the naive release: missed, and shown.
    assert figure.met is False
    assert (
        "lost to naive: round 2: last-byte 19/20 (spread p50 4.00 ms), naive 20/20 (22.00 ms)" in figure.note
    )
    tied = detection_figure("detection", [Round((19, 20), (19, 20)), Round((20, 20), (12, 20))], 0.95)
    assert tied.met is True
    assert "worst: round 1: last-byte 19/20" in tied.note
    assert detection_figure("detection", [Round((18, 20), (10, 20))], 0.95).met is False  # 90 % < 95 %
    # No rate asked for (0.2 ms): only never below naive.
    assert detection_figure("detection", [Round((1, 20), (0, 20))], None).met is True
    quick = detection_figure("detection", rounds, 0.95, judged=False)
    assert (quick.target, quick.met, quick.value) == (None, None, 95.0)


def test_the_readme_shows_a_figure_of_rounds_as_its_worst_round_with_the_median() -> None:
    figure = detection_figure("detection", [Round((19, 20), (18, 20)), Round((20, 20), (17, 20))], 0.95)
    row = next(
        line for line in table({"figures": [asdict(figure)]}).splitlines() if line.startswith("| detection")
    )
    assert row.startswith("| detection | 95.0 % (worst of 2 rounds; median 97.5 %) | 85.0 % | 1.12x |")


def test_shares_sum_to_one_when_the_server_spread_exceeds_the_handler_spread() -> None:
    # The first request's handoff was the slow one: the server spread is wider than the handler's.
    assert shares([Stages(1.0, 20.0, 15.0, 12.0)]) == {"release": 0.067, "server": 0.933, "handler": 0.0}
