"""Hostile input (docs/hostile-input.md): planted files never become active content on the Pages origin.

A bundle holds planted ``.html``, ``.svg``, ``.xhtml`` and ``.xml`` files whose scripts set
``window.__xss`` and call a beacon on the origin. `acklab pages` publishes every raw file as
inert data (``.txt``, or ``.json``); served by a plain static server (as GitLab Pages serves
them: by extension), Chromium opens every published file and every link of every page, and
no planted script runs, no beacon is called.
"""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urljoin

import pytest

from acklab.console.export import build_snapshot
from acklab.evidence.bundle import atomic_write, dump_json, file_table
from tests.console.conftest import browser  # noqa: F401 - a fixture, used by name
from tests.hostile.conftest import read_json, write

pytestmark = [pytest.mark.browser, pytest.mark.slow]

SCRIPT = "window.__xss = 1; new Image().src = '/beacon?' + location.pathname;"
PLANTED = {
    "evil.html": f"<!doctype html><script>{SCRIPT}</script><h1>planted</h1>",
    "reports/evil.svg": (
        f'<svg xmlns="http://www.w3.org/2000/svg" onload="{SCRIPT}"><script>{SCRIPT}</script></svg>'
    ),
    "reports/evil.xml": (f'<html xmlns="http://www.w3.org/1999/xhtml"><script>{SCRIPT}</script></html>'),
    "reports/evil.xhtml": (
        f'<html xmlns="http://www.w3.org/1999/xhtml"><body><script>{SCRIPT}</script></body></html>'
    ),
    "incidents/evil.json": '{"html": "<script>' + SCRIPT + '</script>"}',
    "index.html": f"<script>{SCRIPT}</script>",
}


class Origin:
    """A plain static server (content type by extension) that records every path asked for."""

    def __init__(self, root: Path) -> None:
        self.asked: list[str] = []
        asked, directory = self.asked, str(root)

        class Handler(http.server.SimpleHTTPRequestHandler):
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                super().__init__(*args, directory=directory, **kwargs)

            def do_GET(self) -> None:
                asked.append(self.path)
                super().do_GET()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/"

    def __enter__(self) -> Origin:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Origin, Path]]:
    from tests.evidence.factories import write_run_bundle

    root = tmp_path_factory.mktemp("pages")
    bundle = write_run_bundle(root / "out" / "r1", "r1", {"lost-ack": [(0, "fail")]})
    for rel, content in PLANTED.items():
        write(bundle / rel, content)
    # The planter also recomputed the manifest, so the files look like part of the bundle.
    manifest = read_json(bundle / "manifest.json")
    manifest["files"] = file_table(bundle)
    atomic_write(bundle / "manifest.json", dump_json(manifest))
    public = root / "public"
    build_snapshot(root / "out", public, env={})
    with Origin(public) as origin:
        yield origin, public


def test_every_raw_file_is_published_as_inert_data(site):
    _, public = site
    published = [p for p in (public / "raw").rglob("*") if p.is_file()]
    assert published
    assert {p.suffix for p in published} <= {".txt", ".json"}
    for rel, content in PLANTED.items():
        inert = rel if rel.endswith(".json") else f"{rel}.txt"
        assert (public / "raw" / "r1" / inert).read_text() == content
    # Our own pages and assets are the only active content, and none carries the planted script.
    for page in public.rglob("*.html"):
        assert SCRIPT not in page.read_text(), page


def test_no_planted_script_runs_on_the_pages_origin(browser, site):  # noqa: F811
    origin, public = site
    context = browser.new_context()
    try:
        page = context.new_page()
        urls = [
            origin.url + p.relative_to(public).as_posix() for p in (public / "raw").rglob("*") if p.is_file()
        ]
        for html in ("index.html", "bundles/r1/index.html", "bundles/r1/pipeline.html"):
            page.goto(origin.url + html)
            hrefs = page.eval_on_selector_all("a[href]", "els => els.map(e => e.getAttribute('href'))")
            urls += [urljoin(origin.url + html, h) for h in hrefs if "raw/" in h]
        assert any("evil" in u for u in urls)
        for url in sorted(set(urls)):
            page.goto(url)
            assert page.evaluate("typeof window.__xss") == "undefined", url
        page.wait_for_timeout(300)  # an image beacon would have been asked for by now
        assert not [p for p in origin.asked if p.startswith("/beacon")]
    finally:
        context.close()
