"""How `python -m bench` spends its own time: the runs of a reliability figure several at once, each
in a process of its own; the longest reliability part first; its wall time and each module's
recorded in the results and shown in docs/performance.md."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from bench import __main__ as bench_main
from bench import runs
from bench.__main__ import (
    Measured,
    _parser,
    _timings,
    longest_first,
    machine_busy_s,
    main,
    phase_start,
    pieces,
    run_apart,
    wall_figure,
)
from bench.figures import Figure
from bench.readme import table
from tests.bench.spawned import together, whose
from tests.consumers.scenarios import ack_then_process


def test_the_runs_of_a_figure_run_in_processes_of_their_own_their_results_in_order(monkeypatch):
    monkeypatch.setenv(runs.ENV, "3")
    found = runs.each(whose, list(range(7)))
    assert [square for square, _ in found] == [n * n for n in range(7)]
    assert os.getpid() not in {pid for _, pid in found}


def test_runs_of_a_figure_run_at_once(monkeypatch, tmp_path):
    monkeypatch.setenv(runs.ENV, "2")
    started = time.monotonic()
    pids = runs.each(together, [(tmp_path, n) for n in range(2)])
    assert len(set(pids)) == 2  # one after another, the first would have waited out its 60 s
    assert time.monotonic() - started < 50


def test_one_run_at_once_runs_them_here_one_after_another(monkeypatch):
    monkeypatch.delenv(runs.ENV, raising=False)
    assert runs.each(whose, [2, 3]) == [(4, os.getpid()), (9, os.getpid())]


@pytest.mark.parametrize("raw", ["0", "-2", "three", ""])
def test_a_bad_number_of_runs_at_once_is_refused_by_name(monkeypatch, raw):
    monkeypatch.setenv(runs.ENV, raw)
    with pytest.raises(ValueError, match=f"{runs.ENV}={raw!r}.*at least 1"):
        runs.each(whose, [1, 2])


@pytest.mark.parametrize("option", ["--jobs", "--runs-at-once"])
def test_the_bench_refuses_fewer_than_one_at_once(option, capsys):
    with pytest.raises(SystemExit):
        _parser().parse_args([option, "0"])
    assert "expected a whole number, at least 1" in capsys.readouterr().err


def test_the_part_that_took_longest_last_time_starts_first_and_untimed_ones_ahead():
    earlier = {"fleet": 300.0, "sinks": 90.0, "provider_api": 120.0}
    order = longest_first(["verdict_trust", "sinks", "provider_api", "fleet", "queues"], earlier)
    assert order == ["verdict_trust", "queues", "fleet", "provider_api", "sinks"]


def measured() -> Measured:
    found = Measured({}, [])
    found.seconds["figures"] |= {"race_sharpness": 300.0, "fleet": 240.0}
    found.seconds["reliability"] |= {"fleet": 400.0, "sinks": 200.0}
    found.cpu_s |= {"fleet": 90.0, "sinks": 150.0}
    found.busy |= {"figures": 0.3, "reliability": 0.85}
    return found


def test_the_machine_busy_time_counts_what_this_process_spends():
    before = machine_busy_s()
    assert before is not None  # Linux: /proc/stat
    spent = time.process_time()
    while time.process_time() - spent < 0.3:
        pass
    after = machine_busy_s()
    assert after is not None
    assert after - before >= 0.25  # every other process can only add to it


def test_a_phase_records_the_machines_busy_share_of_its_wall_time_and_cores():
    found = Measured({}, [])
    found.phase("reliability", (100.0, 1000.0), (110.0, 1015.0), cores=2)  # 15 CPU-s in 10 s on 2 cores
    assert found.busy == {"reliability": 0.75}
    found.phase("figures", (0.0, 1000.0), (10.0, 1040.0), cores=2)  # more than they can give: rounding
    assert found.busy["figures"] == 1.0
    found.phase("elsewhere", (0.0, None), (10.0, None), cores=2)  # no /proc/stat: not known, not 0
    assert "elsewhere" not in found.busy
    found.phase("now", phase_start())
    assert 0.0 <= found.busy["now"] <= 1.0


def test_a_part_writes_its_figures_and_its_cpu_and_the_bench_reads_both(monkeypatch, tmp_path, capsys):
    figure = Figure("sinks: a check", 20.0, "of 20 runs", target="20/20", met=True)
    monkeypatch.setattr(bench_main, "run_module", lambda name, **_: ([figure], True))
    out = tmp_path / "figures.json"
    assert main(["--part", "sinks", "--out", str(out)]) == 0
    written = json.loads(out.read_text())
    assert [Figure(**f) for f in written["figures"]] == [figure]
    assert written["cpu_s"] > 0  # this test process's own CPU, at least the imports it made
    part = run_apart("nosuch", quick=True)  # the part's process refuses it: no figures written
    assert (part.ran, part.cpu_s) == (False, None)
    assert "exited 2 without figures" in (part.figures[0].note or "")
    assert "--part nosuch: no such module or piece" in part.output


def test_the_bench_wall_time_is_a_figure_against_its_budget():
    figure = wall_figure(1020.0, measured(), quick=False, jobs=3, runs_at_once=3)
    assert (figure.name, figure.value, figure.unit, figure.target, figure.met) == (
        "make bench wall time", 17.0, "min", "<= 20 min", True,
    )  # fmt: skip
    # 540 s of timing figures; the rest of the wall time is the reliability phase (600 s of parts added up)
    assert "the timing figures 9.0 min" in figure.note
    assert "the reliability parts 8.0 min (3 at a time, 3 run(s) of a figure at once; 10.0 min" in figure.note
    over = wall_figure(1500.0, measured(), quick=False, jobs=3, runs_at_once=3)
    assert over.met is False
    crashed = measured()
    crashed.crashed.append("fleet")
    assert wall_figure(600.0, crashed, quick=False, jobs=3, runs_at_once=3).met is False
    quick = wall_figure(120.0, measured(), quick=True, jobs=3, runs_at_once=3)
    assert (quick.name, quick.target, quick.met) == ("make bench wall time (quick)", None, None)


def test_a_partial_run_refreshes_its_own_modules_times_and_keeps_the_whole_runs_total():
    earlier = {
        "timings": {
            "figures": {"fleet": 250.0, "detection": 100.0},
            "reliability": {"fleet": 500.0},
            "total_s": 1100.0,
        }
    }
    args = _parser().parse_args(["--only", "fleet", "--jobs", "4"])
    merged = _timings(earlier, measured(), args, 700.0)
    assert merged["figures"] == {"fleet": 240.0, "detection": 100.0, "race_sharpness": 300.0}
    assert merged["reliability"] == {"fleet": 400.0, "sinks": 200.0}
    assert merged["reliability_cpu_s"] == {"fleet": 90.0, "sinks": 150.0}
    assert (merged["total_s"], merged["jobs"], merged["runs_at_once"]) == (1100.0, 4, 3)
    assert "busy" not in merged  # a partial run's phases are of its modules only, and none was kept
    whole = _timings(earlier, measured(), _parser().parse_args([]), 900.0)
    assert whole["total_s"] == 900.0
    assert whole["busy"] == {"figures": 0.3, "reliability": 0.85}
    again = _timings({"timings": whole}, measured(), args, 700.0)
    assert again["busy"] == whole["busy"]  # kept from the whole run


def test_the_performance_page_says_where_the_bench_time_went(tmp_path: Path):
    timings: dict[str, Any] = {
        "figures": {"fleet": 240.0, "race_sharpness": 300.0},
        "reliability": {"sinks": 200.0, "fleet": 400.0},
        "jobs": 3,
        "runs_at_once": 3,
    }
    doc = {
        "figures": [vars(Figure("make bench wall time", 17.0, "min", target="<= 20 min", met=True))],
        "elapsed_s": 1020.0,
        "timings": timings,
    }
    shown = table(doc)
    assert "| make bench wall time | 17.0 min | — | — | <= 20 min | yes |" in shown
    assert "`make bench` took 1020 s." in shown
    assert "The timing figures, one module at a time: race_sharpness 300 s, fleet 240 s." in shown
    assert (
        "The reliability parts, 3 at a time with 3 run(s) of a figure at once: fleet 400 s, sinks 200 s."
        in shown
    )
    timings |= {"reliability_cpu_s": {"fleet": 90.0}, "busy": {"figures": 0.3, "reliability": 0.854}}
    shown = table(doc)
    assert "one module at a time, the machine's cores 30% busy: race_sharpness 300 s" in shown
    assert (
        "3 run(s) of a figure at once, the machine's cores 85% busy (a part's CPU: its processes and "
        "those they waited for): fleet 400 s (90 CPU-s), sinks 200 s." in shown
    )


def test_a_module_in_pieces_is_as_many_reliability_parts_and_one_without_is_one():
    assert pieces("verdict_trust") == [
        "verdict_trust:ack-sqlite", "verdict_trust:postgresql", "verdict_trust:receivers",
    ]  # fmt: skip
    assert pieces("beyond_one_event")[0] == "beyond_one_event:subscriptions"
    assert pieces("fleet") == ["fleet"]


@pytest.mark.parametrize("task", ["fleet:runs", "verdict_trust:sqlite", "nowhere"])
def test_a_part_that_names_no_module_or_piece_is_refused(task, tmp_path, capsys):
    assert main(["--part", task, "--out", str(tmp_path / "figures.json")]) == 2
    assert f"--part {task}: no such module or piece" in capsys.readouterr().err
    assert not (tmp_path / "figures.json").exists()


def test_a_figure_says_how_its_runs_ran(monkeypatch):
    monkeypatch.setenv(runs.ENV, "3")
    assert runs.described(20) == "3 runs at once, each in a process of its own"
    assert runs.described(2) == "2 runs at once, each in a process of its own"
    assert runs.described(1) == "one run after another"
    monkeypatch.setenv(runs.ENV, "1")
    assert runs.described(20) == "one run after another"


def test_a_run_the_lab_could_not_carry_out_is_a_run_without_its_verdict_not_a_crash(tmp_path):
    # The consumer's service is never started, so nothing listens where its spec points: the lab
    # fails (exit 4) before the first trial, as when another run's service took this run's port.
    scenario = ack_then_process(tmp_path, "correct", f"sqlite:///{tmp_path / 'payments.db'}")
    assert scenario.service is not None
    (problem,) = runs.mismatches(scenario, tmp_path / "out")
    assert problem.startswith("the lab failed: ")
    assert str(scenario.service.port) in problem


def test_the_console_bench_writes_every_bundle_once_whichever_process_wrote_it(tmp_path, monkeypatch):
    from acklab.evidence.bundle import verify
    from bench import console_scale
    from bench.runs import shares

    for bundles, width in ((5, 2), (7, 3), (1, 1), (2000, 2)):  # each bundle to exactly one process
        numbers = [n for share in shares(bundles, width) for n in share]
        assert sorted(numbers) == list(range(bundles))
    monkeypatch.setattr(console_scale, "GENERATORS", 2)
    console_scale.generate(tmp_path, 5 * console_scale.EXPERIMENTS_PER_BUNDLE)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == [f"run-{n:05d}-{'unsafe' if n % 2 == 0 else 'live'}" for n in range(5)]
    for bundle in tmp_path.iterdir():
        assert verify(bundle).ok, bundle
        assert len(list((bundle / "incidents").iterdir())) == console_scale.EXPERIMENTS_PER_BUNDLE


def test_a_run_of_a_correct_handler_that_did_not_pass_is_named_with_its_first_violation():
    from types import SimpleNamespace

    from bench.external_handlers import why_not

    violation = {"invariant": "eventually-acknowledged", "trial": "timeout-overlap-0", "detail": "x" * 1000}
    result = SimpleNamespace(
        verdict="fail",
        run={
            "experiments": [
                {"name": "lost-ack", "verdict": "pass", "violations": []},
                {"name": "timeout-overlap", "verdict": "fail", "violations": [violation, violation]},
                {"name": "out-of-order", "verdict": "skipped", "violations": []},
            ]
        },
    )
    said = why_not(result)
    assert said.startswith("timeout-overlap=fail (eventually-acknowledged, trial timeout-overlap-0: xxx")
    assert "lost-ack" not in said
    assert "out-of-order" not in said
    assert len(said) < 400  # the detail is cut short: a note, not the incident
    # An error judges nothing: no violation, the lab's reason instead.
    errored = SimpleNamespace(
        verdict="error",
        run={
            "experiments": [
                {"name": "timeout-overlap", "verdict": "error", "violations": [], "reason": "y" * 1000}
            ]
        },
    )
    assert why_not(errored) == f"timeout-overlap=error ({'y' * 300})"


def test_the_slow_handlers_runs_are_shared_out_between_its_servers_none_lost_none_empty():
    from bench.external_handlers import split

    assert split(20, 2) == [10, 10]
    assert split(5, 3) == [2, 2, 1]
    assert split(1, 2) == [1]  # the quick variant's one run: one server
    for total in range(1, 30):
        for shards in range(1, 5):
            shares = split(total, shards)
            assert sum(shares) == total
            assert min(shares) >= 1
            assert max(shares) - min(shares) <= 1
