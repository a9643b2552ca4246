"""The overview heatmap: a row per target and database, and eleven experiments that fit 1300 px
(or scroll sideways in their own region, the row labels staying in view)."""

from __future__ import annotations

import re
from datetime import timedelta
from html import unescape
from pathlib import Path
from typing import Any

import pytest

from acklab.console.index import EvidenceIndex
from acklab.console.overview import EXPERIMENT_ORDER, heatmap
from acklab.evidence.heatmap import wrap_name
from tests.console.conftest import SCREENSHOTS, LiveServer
from tests.console.samples import BASE_TIME, make_run_bundle

ELEVEN = (
    "lost-ack", "lost-ack-reset", "timeout-overlap", "concurrent-duplicates", "conflicting-payload",
    "replay", "crash-after-commit", "crash-mid-transaction", "db-latency", "db-reset", "db-blackhole",
)  # fmt: skip
# main's content box at a 1300 px window: 2rem (30 px) padding each side, and a 15 px scrollbar
CONTENT_AT_1300 = 1300 - 60 - 15


def make_matrix(evidence: Path, *, databases: tuple[str, ...], experiments: tuple[str, ...]) -> Path:
    """fixture:unsafe and fixture:live, each on every database; the newest run last."""
    n = 0
    for target in ("fixture:unsafe", "fixture:live"):
        for database in databases:
            n += 1
            make_run_bundle(
                evidence,
                run_id=f"run-{n}-{database}",
                target=target,
                experiments=experiments,
                trials=1,
                created=BASE_TIME + timedelta(hours=n),
                database=database,
                validate=n == 1,
            )
    return evidence


@pytest.fixture(scope="module")
def two_databases(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_matrix(
        tmp_path_factory.mktemp("dbs") / "out", databases=("sqlite", "postgresql"), experiments=ELEVEN
    )


def test_a_target_on_two_databases_gets_a_row_per_database(two_databases):
    grid = heatmap(EvidenceIndex(two_databases).snapshot())
    assert [r.label for r in grid.rows] == [
        "fixture:unsafe · postgresql",
        "fixture:unsafe · sqlite",
        "fixture:live · postgresql",
        "fixture:live · sqlite",
    ]
    assert grid.experiments == list(ELEVEN)
    assert len(grid.by_row) == 4 * 11
    assert {(r.database, i.database) for (r, _), i in grid.by_row.items()} == {
        ("sqlite", "sqlite"),
        ("postgresql", "postgresql"),
    }
    # Whatever its database, the newest run of a target is still at hand.
    assert grid.cells[("fixture:live", "lost-ack")].bundle == "run-4-postgresql"


def test_one_database_keeps_the_plain_target_label(tmp_path):
    evidence = make_matrix(tmp_path / "out", databases=("postgresql",), experiments=("lost-ack",))
    grid = heatmap(EvidenceIndex(evidence).snapshot())
    assert [r.label for r in grid.rows] == ["fixture:unsafe", "fixture:live"]


def test_the_overview_labels_each_database_row_and_links_its_own_incidents(client_for, two_databases):
    html = client_for(two_databases).get("/").text
    frame = html[html.index('<div class="heatmap-frame">') : html.index('id="latency-h"')]
    assert frame.count("<a href=") == 44
    for run in ("run-1-sqlite", "run-2-postgresql", "run-3-sqlite", "run-4-postgresql"):
        assert f'href="/bundles/{run}/incidents/{run}-fixture-' in frame
    # every row names its revision (the samples record none: "revision unknown", said so)
    assert "<title>fixture:live · postgresql @ revision unknown</title>" in frame
    assert "fixture:live · postgresql @ revision unknown \u00d7 db-blackhole: pass" in unescape(frame)
    assert "22 target \u00d7 experiment cells failing" in html  # the unsafe rows, counted per database


def test_eleven_experiments_fit_a_1300_px_window(two_databases, client_for):
    html = client_for(two_databases).get("/").text
    widths = [int(w) for w in re.findall(r'<svg [^>]*class="chart heatmap[^"]*"[^>]*width="(\d+)"', html)]
    assert len(widths) == 2  # row labels, grid
    assert sum(widths) <= CONTENT_AT_1300
    region = re.search(r'<div class="scroll heatmap-scroll"([^>]*)>', html)
    assert region is not None
    assert 'tabindex="0"' in region.group(1)
    assert 'role="region"' in region.group(1)


def test_long_experiment_names_wrap_after_a_hyphen():
    assert wrap_name("db-reset", 12) == ["db-reset"]
    assert wrap_name("concurrent-duplicates", 12) == ["concurrent-", "duplicates"]
    assert wrap_name("crash-mid-transaction", 12) == ["crash-mid-", "transaction"]
    assert wrap_name("lost-ack-reset", 12) == ["lost-ack-", "reset"]
    assert wrap_name("supercalifragilistic", 12) == ["supercalifr-", "agilistic"]
    assert all(len(line) <= 12 for name in EXPERIMENT_ORDER for line in wrap_name(name, 12))
    assert tuple(sorted(ELEVEN, key=EXPERIMENT_ORDER.index)) == ELEVEN  # every one has its column


def geometry(page: Any) -> dict[str, float]:
    return page.evaluate(
        """() => {
          const region = document.querySelector('.heatmap-scroll');
          const labels = document.querySelector('.heatmap-labels').getBoundingClientRect();
          return {scroll: region.scrollWidth, client: region.clientWidth,
                  page: document.documentElement.scrollWidth, window: document.documentElement.clientWidth,
                  labelsLeft: labels.left, labelsRight: labels.right,
                  regionLeft: region.getBoundingClientRect().left};
        }"""
    )


@pytest.mark.browser
def test_the_heatmap_fits_at_1300_and_scrolls_in_its_region_at_800(browser, two_databases):
    with LiveServer(two_databases) as server:
        for width, fits in ((1300, True), (800, False)):
            context = browser.new_context(viewport={"width": width, "height": 900})
            try:
                page = context.new_page()
                messages: list[Any] = []

                def keep(message: Any, into: list[Any] = messages) -> None:
                    into.append(message)

                page.on("console", keep)
                page.goto(server.url)
                before = geometry(page)
                assert before["page"] <= before["window"], "the page itself must never scroll sideways"
                assert (before["scroll"] <= before["client"]) is fits, before
                page.locator(".heatmap-scroll").evaluate("r => { r.scrollLeft = r.scrollWidth; }")
                after = geometry(page)
                assert after["labelsLeft"] == before["labelsLeft"] >= 0  # row labels stay in view
                assert after["labelsRight"] <= after["regionLeft"] + 1
                page.locator(".heatmap-frame").screenshot(path=str(SCREENSHOTS / f"heatmap-{width}.png"))
                assert [m.text for m in messages if m.type in ("error", "warning")] == []
            finally:
                context.close()
