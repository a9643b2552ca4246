"""What `make demo` shows on the Compare page, in Chromium: its Part 2 (one plan, one seed, against
the unsafe and the live handler) read delivery by delivery with j/k, live and static."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from acklab.console.export import build_snapshot
from tests.console.conftest import SCREENSHOTS, LiveServer, SubPathServer
from tests.console.test_browser import current_step, location, watched

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.fixture(scope="module")
def demo_evidence(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What `make demo` leaves before its repair story: `acklab demo` (one trial per experiment)."""
    out = tmp_path_factory.mktemp("demo") / "out"
    done = subprocess.run(
        [sys.executable, "-c", "from acklab.cli import main; main()", "demo", "--trials", "1", "--seed", "5",
         "--out", str(out)],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]  # the unsafe handler failed, the live one passed
    return out


@pytest.fixture(scope="module")
def demo_sites(demo_evidence: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    public = tmp_path_factory.mktemp("pages") / "public"
    build_snapshot(demo_evidence, public, env={"CI_PIPELINE_ID": "9"})
    with LiveServer(demo_evidence) as live, SubPathServer(public, "/group/project/") as static:
        yield f"{live.url}/compare", static.url + "compare/index.html"


def step_through(page: Any) -> None:
    """Open unsafe vs live on lost-ack, then step with j and k: the lost ack, then the retry
    that doubles the unsafe handler's effect and leaves the live handler's at one."""
    experiment = page.locator("td:first-child", has_text=re.compile(r"^lost-ack$"))
    row = page.locator("tr", has=experiment).filter(has_text="fixture:unsafe")
    assert row.count() == 1
    with page.expect_navigation():
        row.locator("a.button").click()
    # titled with both revisions: the sha256 of each handler module that ran
    assert re.fullmatch(
        r"fixture:unsafe handler [0-9a-f]{8} vs fixture:live handler [0-9a-f]{8}", page.inner_text("h1")
    )
    assert "the same deliveries under the same faults" in page.inner_text(".lede")
    assert current_step(page) == "2"  # opened at the first delivery where the handlers differ
    page.keyboard.press("k")
    assert current_step(page) == "1"
    panel = page.locator("#step-1")
    assert panel.locator(".side-step").nth(0).inner_text().count("lost-ack") == 1
    page.keyboard.press("j")
    assert current_step(page) == "2"
    unsafe, live = page.locator("#step-2 .side-step").all()
    assert "VIOLATION: more than one effect" in unsafe.inner_text()
    assert "1 → 2" in unsafe.inner_text()
    assert "OK" in live.inner_text()
    assert "1 → 1" in live.inner_text()
    assert "the handlers differ here" in page.inner_text("#step-2")
    page.keyboard.press("k")
    assert current_step(page) == "1"
    page.keyboard.press("j")


def test_the_demo_comparison_steps_in_the_live_console(browser, demo_sites):
    with watched(browser) as w:
        w.open(demo_sites[0])
        assert "Nothing to compare" not in w.page.inner_text("main")
        # every default experiment (the six, and the three beyond one event), unsafe vs live, one seed
        rows = w.page.locator("table.data tbody tr")
        assert rows.count() == 9
        assert set(rows.locator("td.num").all_inner_texts()) == {"5"}
        step_through(w.page)
        assert "step=2" in location(w.page)
        w.shot("demo-compare-live")
        w.assert_clean()


def test_the_demo_comparison_steps_in_the_static_snapshot(browser, demo_sites):
    with watched(browser) as w:
        w.open(demo_sites[1])
        step_through(w.page)
        assert location(w.page).endswith("#step-2")
        w.shot("demo-compare-static")
        w.assert_clean()


def test_what_an_adopter_reads_first_in_the_demo_evidence(browser, demo_sites):
    """At 1366x900 an incident's why (its violations) is on the first screen, the boundary
    sentence is said once, and a burst's duplicates show the burst their proof says landed;
    the Pages banner names the commit the bundles were run at."""
    live, static = demo_sites
    context = browser.new_context(viewport={"width": 1366, "height": 900})
    try:
        page = context.new_page()
        page.goto(live)
        experiment = page.locator("td:first-child", has_text=re.compile(r"^concurrent-duplicates$"))
        with page.expect_navigation():
            page.locator("tr", has=experiment).filter(has_text="fixture:unsafe").locator("a.button").click()
        assert "the handlers differ here" in page.inner_text(".step-panel.current")
        with page.expect_navigation():
            page.locator(".side-head a").nth(0).click()
        assert "concurrent-duplicates against fixture:unsafe" in page.inner_text("h1")
        violations = page.locator("h2", has_text="Violations")
        assert violations.bounding_box()["y"] < 900 - 100, "the violations start below the fold"
        assert page.locator("main table.data").first.bounding_box()["y"] < 900
        assert page.inner_text("body").count("exactly-once delivery across systems") == 1
        faults = page.locator("table.timeline tbody tr td:nth-child(5)").all_inner_texts()
        assert faults
        assert all(f.startswith("burst of 16 released together") for f in faults), faults[:3]
        assert "landed" in page.inner_text(".fault-proof")
        page.screenshot(path=str(SCREENSHOTS / "adopter-incident-1366.png"))
        page.goto(static.removesuffix("compare/index.html") + "index.html")
        assert re.search(r"commit [0-9a-f]{12}", page.inner_text(".banner")), page.inner_text(".banner")
    finally:
        context.close()
