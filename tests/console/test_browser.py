"""The console in a real browser (Debian's Chromium via Playwright): live, and as a static snapshot.

Every view renders without console errors or CSP violations, keyboard stepping works and
keeps the step in the URL, a shared link restores the comparison (with and without
JavaScript), the snapshot works from a sub-path, and planted script never runs.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from acklab.console.export import build_snapshot
from tests.console.conftest import SCREENSHOTS, SubPathServer
from tests.console.samples import XSS_SCRIPT

pytestmark = [pytest.mark.browser, pytest.mark.slow]

LOST_ACK = "bundles/run-0001-unsafe/incidents/run-0001-unsafe-fixture-unsafe-lost-ack"
COMPARE = (
    "compare?left=run-0001-unsafe:run-0001-unsafe-fixture-unsafe-lost-ack"
    "&right=run-0001-live:run-0001-live-fixture-live-lost-ack"
)
LIVE_VIEWS = {
    "overview": "",
    "bundle": "bundles/run-0001-unsafe",
    "incident": LOST_ACK,
    "compare-index": "compare",
    "compare": COMPARE + "&event=evt_7_lost-ack_1&step=2",
    "trail": "bundles/flow-0001/trail",
    "pipeline": "bundles/run-tampered/pipeline",
    "pipelines": "pipelines",
    "incomplete": "bundles/run-incomplete",
}
# Runs before any page script (CDP-injected, so the CSP does not apply to it): records
# every CSP violation the page reports.
WATCH_CSP = """
window.__csp = [];
document.addEventListener('securitypolicyviolation', function (e) {
  window.__csp.push(e.violatedDirective + ' ' + e.blockedURI);
});
"""


class Watched:
    """A page with its console errors, uncaught exceptions and CSP violations collected."""

    def __init__(self, page: Any) -> None:
        self.page = page
        self.errors: list[str] = []
        page.on("console", lambda m: self.errors.append(m.text) if m.type in ("error", "warning") else None)
        page.on("pageerror", lambda exc: self.errors.append(str(exc)))
        page.on("response", lambda r: self.errors.append(f"{r.status} {r.url}") if r.status >= 400 else None)
        page.add_init_script(WATCH_CSP)

    def open(self, url: str) -> Any:
        response = self.page.goto(url)
        assert response is not None
        assert response.status == 200, url
        return response

    def assert_clean(self) -> None:
        assert self.errors == []
        assert self.page.evaluate("window.__csp") == []
        assert self.page.evaluate("typeof window.__xss") == "undefined"

    def shot(self, name: str) -> None:
        self.page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)


@contextmanager
def watched(browser: Any, *, javascript: bool = True) -> Iterator[Watched]:
    context = browser.new_context(viewport={"width": 1280, "height": 900}, java_script_enabled=javascript)
    try:
        yield Watched(context.new_page())
    finally:
        context.close()


def current_step(page: Any) -> str:
    return page.get_attribute(".step-panel.current", "data-step")


def location(page: Any) -> str:
    # page.url follows history.replaceState through an asynchronous protocol event; ask the page.
    return page.evaluate("location.href")


@pytest.mark.parametrize("name", sorted(LIVE_VIEWS))
def test_every_live_view_renders_cleanly(browser, live, name):
    with watched(browser) as w:
        w.open(f"{live.url}/{LIVE_VIEWS[name]}")
        assert w.page.locator("main h1").first.is_visible()
        # the boundary sentence once a page: the incident's own statement, else the footer's
        assert w.page.inner_text("body").count("exactly-once delivery across systems") == 1
        w.shot(f"live-{name}")
        w.assert_clean()


def test_keyboard_steps_through_deliveries_and_keeps_the_step_in_the_url(browser, live):
    with watched(browser) as w:
        w.open(f"{live.url}/{COMPARE}&event=evt_7_lost-ack_0")
        assert current_step(w.page) == "2"  # opened at the first delivery where the handlers differ
        for key, expected in (("k", "1"), ("k", "1"), ("j", "2"), ("ArrowLeft", "1"), ("ArrowDown", "2"),
                              ("ArrowUp", "1"), ("ArrowRight", "2"), ("ArrowLeft", "1")):  # fmt: skip
            w.page.keyboard.press(key)
            assert current_step(w.page) == expected, key
            assert f"step={expected}" in location(w.page)
            assert w.page.locator(f"tr.current[data-step='{expected}']").count() == 2
        assert "event=evt_7_lost-ack_0" in location(w.page)
        w.page.keyboard.press("j")
        shared = location(w.page)
        w.assert_clean()
    with watched(browser) as w:  # a shared link restores the same view
        w.open(shared)
        assert current_step(w.page) == "2"
        assert w.page.locator("#step-2").is_visible()
        assert not w.page.locator("#step-1").is_visible()
        w.assert_clean()


def test_a_shared_link_restores_the_comparison_without_javascript(browser, live):
    with watched(browser, javascript=False) as w:
        w.open(f"{live.url}/{COMPARE}&event=evt_7_lost-ack_1&step=2")
        assert w.page.locator("nav.events a[aria-current='true']").inner_text() == "evt_7_lost-ack_1"
        assert w.page.locator("#step-2").is_visible()
        assert not w.page.locator("#step-1").is_visible()
        with w.page.expect_navigation():  # plain links step without JavaScript
            w.page.click(".step-panel.current a[data-rel='prev']")
        assert "step=1" in w.page.url
        assert w.page.locator("#step-1").is_visible()
        w.shot("live-compare-nojs")


@pytest.fixture(scope="module")
def snapshot_site(sample_evidence: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SubPathServer]:
    public = tmp_path_factory.mktemp("pages") / "public"
    build_snapshot(sample_evidence, public, env={"CI_PIPELINE_ID": "777", "CI_COMMIT_SHA": "f" * 40})
    with SubPathServer(public, "/group/project/") as server:
        yield server


def test_static_snapshot_works_from_a_sub_path(browser, snapshot_site):
    with watched(browser) as w:
        w.open(snapshot_site.url)
        assert "Historical snapshot" in w.page.inner_text(".banner")
        assert "pipeline 777" in w.page.inner_text(".banner")
        w.shot("static-overview")
        with w.page.expect_navigation():
            w.page.click("a.cell >> nth=0")
        assert "/group/project/bundles/" in w.page.url
        assert "incident" in w.page.inner_text(".crumbs")
        w.shot("static-incident")
        with w.page.expect_navigation():
            w.page.click("text=Raw incident JSON")
        assert w.page.url.endswith(".json")
        w.page.go_back()
        # A JSON document has no <link rel=icon>, so Chromium asks the host root for
        # /favicon.ico, outside the project's sub-path: a 404 of the host, not of the snapshot.
        w.errors[:] = [e for e in w.errors if not e.startswith("Failed to load resource")]
        with w.page.expect_navigation():
            w.page.click("text=Compare fixture:unsafe vs fixture:live")
        assert "/group/project/compare/" in w.page.url
        assert current_step(w.page) == "2"  # the first delivery where the handlers differ
        assert "the handlers differ here" in w.page.inner_text(".step-panel.current")
        w.page.keyboard.press("k")
        assert current_step(w.page) == "1"
        assert location(w.page).endswith("#step-1")
        w.page.keyboard.press("j")
        assert current_step(w.page) == "2"
        assert location(w.page).endswith("#step-2")
        w.shot("static-compare")
        for link, lands in (
            ("Pipelines", "pipelines/index.html"),
            ("Compare", "compare/index.html"),
            ("Overview", "index.html"),
        ):
            with w.page.expect_navigation():
                w.page.click(f"header nav >> text={link}")
            assert w.page.url == snapshot_site.url + lands
        w.open(snapshot_site.url + "bundles/flow-0001/trail.html")
        w.shot("static-trail")
        w.open(snapshot_site.url + "bundles/run-tampered/pipeline.html")
        assert "Integrity warning" in w.page.inner_text("main")
        w.assert_clean()


def test_static_comparison_steps_by_anchor_without_javascript(browser, snapshot_site):
    with watched(browser, javascript=False) as w:
        w.open(snapshot_site.url + "compare/index.html")
        with w.page.expect_navigation():
            w.page.click("a.button >> nth=0")
        assert w.page.locator("#step-2").is_visible()  # opened where the handlers first differ
        assert not w.page.locator("#step-1").is_visible()
        w.page.click("#step-2 a[data-rel='prev']")
        assert location(w.page).endswith("#step-1")
        styles = w.page.eval_on_selector_all(
            "tr.current", "rows => rows.map(r => getComputedStyle(r).outlineStyle)"
        )
        assert set(styles) == {"none"}  # no stale highlight of step 2
        assert w.page.locator("#step-1").is_visible()
        assert not w.page.locator("#step-2").is_visible()
        w.shot("static-compare-nojs")


def test_planted_script_never_runs_live(browser, live_hostile):
    with watched(browser) as w:
        for path in (
            "",
            "bundles/run-0000-unsafe",
            "bundles/run-0000-unsafe/incidents/run-0000-unsafe-fixture-unsafe-lost-ack",
            "compare",
            "compare?left=run-0000-unsafe:run-0000-unsafe-fixture-unsafe-lost-ack"
            "&right=run-0000-live:run-0000-live-fixture-live-lost-ack",
            "bundles/flow-0001/trail",
        ):
            w.open(f"{live_hostile.url}/{path}")
            w.assert_clean()
        assert XSS_SCRIPT in w.page.inner_text("main")  # shown as text, not run
        w.shot("live-hostile-trail")


def test_planted_script_never_runs_in_the_snapshot(browser, hostile_evidence, tmp_path):
    public = tmp_path / "public"
    build_snapshot(hostile_evidence, public, env={})
    with SubPathServer(public, "/group/project/") as site, watched(browser) as w:
        for page in sorted(public.rglob("*.html")):
            w.open(site.url + page.relative_to(public).as_posix())
            w.assert_clean()
        w.open(site.url + "bundles/run-0000-unsafe/incidents/run-0000-unsafe-fixture-unsafe-lost-ack.html")
        assert XSS_SCRIPT in w.page.inner_text("main")
        w.shot("static-hostile-incident")


def test_the_live_console_shows_a_new_run_on_the_first_reload(browser, evidence):
    """A run that lands while the console is open is on the very next page load, never one
    load late (the first request after a write rescans at once)."""
    from tests.console.conftest import LiveServer
    from tests.console.samples import make_run_bundle

    with LiveServer(evidence) as server, watched(browser) as w:
        w.open(f"{server.url}/pipelines")
        assert "run-late-live" not in w.page.content()
        make_run_bundle(
            evidence, run_id="run-late-live", target="fixture:live", experiments=("replay",), trials=1
        )
        w.page.reload()
        assert "run-late-live" in w.page.content()
        w.assert_clean()


CONCURRENT = (
    "compare?left=run-0001-unsafe:run-0001-unsafe-fixture-unsafe-concurrent-duplicates"
    "&right=run-0001-live:run-0001-live-fixture-live-concurrent-duplicates"
)


@pytest.mark.parametrize("width", [1366, 1440, 1920])
def test_the_comparison_shows_emails_beside_rows_and_clips_no_column(browser, live, width):
    context = browser.new_context(viewport={"width": width, "height": 800})
    try:
        page = context.new_page()
        assert page.goto(f"{live.url}/{CONCURRENT}&step=4").status == 200
        # Every scrolling box shows all it holds, and the page itself is no wider than the window.
        clipped = page.evaluate(
            "() => [...document.querySelectorAll('.scroll')]"
            ".filter(e => e.scrollWidth > e.clientWidth + 1).map(e => e.innerText.slice(0, 60))"
        )
        assert clipped == []
        assert page.evaluate("document.documentElement.scrollWidth") <= width
        for side in page.locator(".timelines table").all():
            assert "EMAILS" in side.locator("thead").inner_text().upper()
        # The unsafe side mailed a receipt per delivery: its fourth is over the limit, in both views.
        unsafe, live_side = page.locator(".timelines table").all()
        last = unsafe.locator("tbody tr").nth(3)
        assert last.locator("td.count-bad").inner_text() == "4"
        assert live_side.locator("tbody tr").nth(3).locator("td.count-bad").count() == 0
        current = page.locator(".step-panel.current .side-step").first
        assert "VIOLATION: more than one effect and more than one email" in current.inner_text()
        page.screenshot(path=str(SCREENSHOTS / f"compare-emails-{width}.png"), full_page=True)
    finally:
        context.close()
