"""The benchmark's output contract: results.json's shape, and the table in docs/performance.md made from it.

Runs the quick variant of one cheap module (the journal's); values are never asserted,
only their shape: these machines are shared and noisy.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest

from bench.__main__ import SUITE, main
from bench.figures import RESULTS
from bench.readme import END, README, START, MarkersMissing, render, table

FIGURE_KEYS = {"name", "value", "unit", "baseline", "ratio", "target", "met"}


@pytest.fixture(scope="module")
def quick_results(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("bench") / "results.json"
    assert main(["--quick", "--only", "journal_writes", "--out", str(out)]) == 0
    return json.loads(out.read_text())


def test_the_quick_journal_figures_have_the_results_shape(quick_results):
    assert {"machine", "versions", "figures"} <= set(quick_results)
    assert quick_results["machine"]["cpus"] >= 1
    assert quick_results["quick"] is True
    figures = quick_results["figures"]
    assert [f["name"] for f in figures] == quick_results["suite"]["journal_writes"]
    assert len(figures) == 3
    for figure in figures:
        assert set(figure) >= FIGURE_KEYS, figure
        assert isinstance(figure["value"], float)
        assert figure["value"] > 0
        assert isinstance(figure["baseline"], float)
        assert figure["baseline"] > 0
        assert figure["ratio"] == pytest.approx(figure["value"] / figure["baseline"])
        assert figure["met"] in (True, False, None)
        assert figure["unit"] in ("rows/s", "rows/CPU-s")


def test_the_readme_table_renders_every_figure_between_the_markers(quick_results):
    readme = f"# x\n\nbefore\n{START}\nstale\n{END}\nafter\n"
    rendered = render(readme, quick_results)
    assert rendered.startswith("# x\n\nbefore\n" + START + "\n| figure | value | baseline | ratio |")
    assert rendered.endswith(END + "\nafter\n")
    assert "stale" not in rendered
    for figure in quick_results["figures"]:
        assert f"| {figure['name']} |" in rendered
    assert render(rendered, quick_results) == rendered  # idempotent


def test_a_figure_that_was_not_measured_shows_as_such():
    doc = {
        "figures": [
            {"name": "explorer", "value": None, "unit": "s", "baseline": None, "ratio": None,
             "target": "<= 1 s", "met": None, "note": "not measured: not built yet"}
        ]
    }  # fmt: skip
    assert "| explorer | — | — | — | <= 1 s | not measured |" in table(doc)


def test_a_readme_without_markers_is_refused(quick_results):
    with pytest.raises(MarkersMissing):
        render("# no markers here\n", quick_results)


def test_the_committed_readme_table_is_the_one_the_committed_results_give():
    doc = json.loads(RESULTS.read_text())
    current = Path(README).read_text()
    assert render(current, doc) == current, "run `python -m bench.readme` after `python -m bench`"


@pytest.mark.parametrize("module", SUITE)
def test_every_module_of_the_suite_imports_and_has_figures(module):
    # The suite borrows handlers and samples from tests/: a refactor there must fail here,
    # not in the next `make bench`.
    found = importlib.import_module(f"bench.{module}")
    assert callable(getattr(found, "figures", None)) or callable(getattr(found, "reliability", None))


@pytest.mark.slow
@pytest.mark.postgres
def test_reliability_figures_come_from_processes_of_their_own_after_the_timing_ones(tmp_path):
    out = tmp_path / "results.json"
    only = ("--only", "journal_writes", "--only", "external_handlers")
    assert main(["--quick", *only, "--jobs", "2", "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert len(doc["suite"]["journal_writes"]) == 3
    handlers = [f for f in doc["figures"] if f["name"] in doc["suite"]["external_handlers"]]
    assert len(handlers) == 3
    for figure in handlers:  # each handler passed its one quick run, counted in the part's process
        assert (figure["value"], figure["unit"]) == (100.0, "%"), figure
        assert "1/1 runs of lost-ack passed" in figure["note"]
