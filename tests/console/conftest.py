"""Fixtures of the console tests: sample evidence, an in-process client, live servers, one browser."""

from __future__ import annotations

import functools
import http.server
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from anyio.from_thread import BlockingPortal, start_blocking_portal
from fastapi import FastAPI

from acklab.console.app import create_app
from acklab.harness.ports import free_port
from tests.console.samples import make_evidence

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
SCREENSHOTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "screenshots"


class AppClient:
    """A synchronous client for the console app in-process (starlette's TestClient warns under httpx 0.28)."""

    def __init__(self, app: FastAPI, portal: BlockingPortal) -> None:
        self.app = app
        self._portal = portal
        self._client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1")

    def request(self, method: str, url: str, **kwargs: Any) -> httpx.Response:
        return self._portal.call(functools.partial(self._client.request, method, url, **kwargs))

    def get(self, url: str, **kwargs: Any) -> httpx.Response:
        return self.request("GET", url, **kwargs)

    def close(self) -> None:
        self._portal.call(self._client.aclose)


@pytest.fixture(scope="session")
def sample_evidence(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two unsafe/live run pairs, a flow with a trail, a tampered and an incomplete bundle (read-only use)."""
    return make_evidence(tmp_path_factory.mktemp("evidence") / "out")


@pytest.fixture(scope="session")
def hostile_evidence(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Evidence whose recorded fields carry script and attribute-breaking payloads."""
    return make_evidence(tmp_path_factory.mktemp("hostile") / "out", runs=1, hostile=True)


@pytest.fixture
def evidence(sample_evidence: Path, tmp_path: Path) -> Path:
    """A private copy of the sample evidence that a test may change."""
    return Path(shutil.copytree(sample_evidence, tmp_path / "out", symlinks=True))


@pytest.fixture(scope="session")
def portal() -> Iterator[BlockingPortal]:
    with start_blocking_portal() as portal:
        yield portal


@pytest.fixture
def client_for(portal: BlockingPortal) -> Iterator[Any]:
    """Make an in-process client over an evidence directory (index refreshed on every request)."""
    clients: list[AppClient] = []

    def make(evidence: Path) -> AppClient:
        client = AppClient(create_app(evidence, refresh_interval=0.0), portal)
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.close()


@pytest.fixture
def client(client_for: Any, sample_evidence: Path) -> AppClient:
    return client_for(sample_evidence)


class LiveServer:
    """The console under uvicorn on a real socket, in a thread."""

    def __init__(self, evidence: Path) -> None:
        self.port = free_port()
        config = uvicorn.Config(create_app(evidence), host="127.0.0.1", port=self.port, log_level="warning")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> LiveServer:
        self.thread.start()
        deadline = time.monotonic() + 15
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the console did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


@pytest.fixture(scope="session")
def live(sample_evidence: Path) -> Iterator[LiveServer]:
    with LiveServer(sample_evidence) as server:
        yield server


@pytest.fixture(scope="session")
def live_hostile(hostile_evidence: Path) -> Iterator[LiveServer]:
    with LiveServer(hostile_evidence) as server:
        yield server


class SubPathServer:
    """A static file server that serves `root` only under `prefix` (like GitLab Pages' /<project>/)."""

    def __init__(self, root: Path, prefix: str) -> None:
        self.prefix = prefix.rstrip("/") + "/"
        directory = str(root)
        prefix_ = self.prefix

        class Handler(http.server.SimpleHTTPRequestHandler):
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                super().__init__(*args, directory=directory, **kwargs)

            def translate_path(self, path: str) -> str:
                if not path.startswith(prefix_):
                    return str(Path(directory) / "__outside_the_project__")
                return super().translate_path("/" + path[len(prefix_) :])

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}{self.prefix}"

    def __enter__(self) -> SubPathServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One headless Chromium (Debian's) per test module; each test opens its own page.

    Module scope, not session: Playwright's sync API keeps an event loop running in the
    main thread while it is open, and every later test that calls asyncio.run() would
    fail with "cannot be called from a running event loop".
    """
    from playwright.sync_api import sync_playwright

    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        instance = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield instance
        instance.close()
