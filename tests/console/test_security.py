"""The console is read-only, sends strict headers, and raw files never leave the evidence directory."""

from __future__ import annotations

import http.client
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from acklab.console.security import CSP, resolve_inside
from tests.console.conftest import LiveServer

PAGES = [
    "/",
    "/compare",
    "/pipelines",
    "/bundles/run-0000-unsafe",
    "/bundles/run-0000-unsafe/incidents/run-0000-unsafe-fixture-unsafe-lost-ack",
    "/bundles/flow-0001/trail",
    "/bundles/run-tampered/pipeline",
    "/raw/run-0000-unsafe/run.json",
    "/static/console.css",
    "/no/such/page",
]


@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE", "PROPFIND"])
@pytest.mark.parametrize("path", ["/", "/raw/run-0000-unsafe/run.json", "/static/console.css", "/nowhere"])
def test_every_method_but_get_and_head_is_refused(client, method, path):
    response = client.request(method, path, content=b"x")
    assert response.status_code == 405
    assert response.headers["allow"] == "GET, HEAD"
    assert response.headers["content-security-policy"] == CSP


def test_no_endpoint_writes(client, sample_evidence):
    before = sorted((p, p.stat().st_mtime_ns) for p in sample_evidence.rglob("*"))
    for path in PAGES:
        client.get(path)
        client.request("DELETE", path)
        client.request("POST", path, json={"verdict": "pass"})
    assert sorted((p, p.stat().st_mtime_ns) for p in sample_evidence.rglob("*")) == before


@pytest.mark.parametrize("path", PAGES)
def test_security_headers_on_every_response(client, path):
    response = client.get(path)
    assert response.status_code in (200, 404)
    headers = response.headers
    assert headers["x-content-type-options"] == "nosniff"
    assert headers["referrer-policy"] == "no-referrer"
    assert "frame-ancestors 'none'" in headers["content-security-policy"]
    if path.startswith("/raw/"):
        assert "sandbox" in headers["content-security-policy"]
    else:
        assert headers["content-security-policy"] == CSP


def test_policy_is_the_strict_one():
    for directive in (
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "object-src 'none'",
        "base-uri 'none'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    ):
        assert directive in CSP
    assert "unsafe-inline" not in CSP


def test_api_docs_are_not_served(client):
    for path in ("/docs", "/redoc", "/openapi.json"):
        assert client.get(path).status_code == 404


def test_pages_have_no_inline_script_or_style(client):
    for path in PAGES:
        response = client.get(path)
        if "text/html" not in response.headers["content-type"]:
            continue
        body = response.text
        assert "<script>" not in body
        assert " style=" not in body
        assert " onclick=" not in body.lower()
        assert "<style" not in body


def raw_get(base: str, path: str) -> tuple[int, bytes]:
    """A request whose path goes on the wire exactly as written (no client-side normalisation)."""
    host, port = base.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        connection.putrequest("GET", path, skip_accept_encoding=True)
        connection.endheaders()
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


TRAVERSALS = [
    "/raw/run-0000-unsafe/../../../../etc/passwd",
    "/raw/run-0000-unsafe/..%2f..%2f..%2f..%2fetc%2fpasswd",
    "/raw/run-0000-unsafe/%2e%2e%2f%2e%2e%2f%2e%2e%2fetc%2fpasswd",
    "/raw/run-0000-unsafe/%2e%2e/%2e%2e/run-0000-live/run.json",
    "/raw/run-0000-unsafe/..%5c..%5cetc%5cpasswd",
    "/raw/run-0000-unsafe//etc/passwd",
    "/raw/run-0000-unsafe/%2fetc%2fpasswd",
    "/raw/run-0000-unsafe/incidents//../run.json",
    "/raw/run-0000-unsafe/./run.json",
    "/raw/%2e%2e/etc/passwd",
    "/raw/../../etc/passwd",
    "/raw/run-0000-unsafe/run.json%00.html",
    "/raw/run-0000-unsafe/outside-link",
    "/raw/run-0000-unsafe/incidents",
]


@pytest.fixture(scope="module")
def trap(sample_evidence: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """A console over evidence whose bundle holds a symlink pointing out of it."""
    evidence = Path(shutil.copytree(sample_evidence, tmp_path_factory.mktemp("trap") / "out"))
    (evidence / "run-0000-unsafe" / "outside-link").symlink_to("/etc/passwd")
    with LiveServer(evidence) as server:
        yield server


@pytest.mark.slow
@pytest.mark.parametrize("path", TRAVERSALS)
def test_raw_files_cannot_leave_the_evidence_directory(trap, path):
    status, body = raw_get(trap.url, path)
    assert status in (400, 404)
    assert b"root:" not in body


@pytest.mark.slow
def test_raw_file_is_served_as_data_over_a_real_socket(live):
    status, body = raw_get(live.url, "/raw/run-0000-unsafe/run.json")
    assert status == 200
    assert b'"run_id": "run-0000-unsafe"' in body


@pytest.mark.slow
def test_head_answers_without_a_body(live):
    host, port = live.url.removeprefix("http://").split(":")
    for path in ("/", "/raw/run-0000-unsafe/run.json", "/static/console.js"):
        connection = http.client.HTTPConnection(host, int(port), timeout=10)
        connection.request("HEAD", path)
        response = connection.getresponse()
        assert response.status == 200, path
        assert response.read() == b""
        assert response.getheader("x-content-type-options") == "nosniff"
        connection.close()


def test_resolve_inside_refuses_every_way_out(tmp_path):
    base = tmp_path / "bundle"
    (base / "incidents").mkdir(parents=True)
    (base / "incidents" / "a.json").write_text("{}")
    (tmp_path / "secret.txt").write_text("secret")
    (base / "up").symlink_to(tmp_path / "secret.txt")
    (base / "dir-up").symlink_to(tmp_path)
    assert resolve_inside(base, "incidents/a.json") == (base / "incidents" / "a.json").resolve()
    for rel in (
        "../secret.txt",
        "incidents/../../secret.txt",
        "/etc/passwd",
        str(tmp_path / "secret.txt"),
        "incidents//a.json",
        "./incidents/a.json",
        "incidents\\a.json",
        "up",
        "dir-up/secret.txt",
        "incidents",
        "",
        "a\x00b",
    ):
        assert resolve_inside(base, rel) is None, rel


def test_symlinked_bundle_is_not_followed(client_for, tmp_path, sample_evidence):
    evidence = tmp_path / "ev"
    evidence.mkdir()
    os.symlink(sample_evidence / "run-0000-unsafe", evidence / "linked")
    client = client_for(evidence)
    assert client.get("/raw/linked/run.json").status_code == 404
    assert client.get("/bundles/linked").status_code == 404


def test_unknown_things_are_404_pages_not_errors(client):
    for path in (
        "/bundles/nope",
        "/bundles/run-0000-unsafe/incidents/nope",
        "/bundles/run-0000-unsafe/trail",
        "/bundles/nope/pipeline",
        "/compare?left=nope:x&right=run-0000-live:y",
        "/raw/nope/run.json",
    ):
        response = client.get(path)
        assert response.status_code == 404, path
        assert "Not found" in response.text


def test_bad_query_values_do_not_break_pages(client):
    assert client.get("/?page=abc").status_code == 200
    assert client.get("/?page=-4").status_code == 200
    assert client.get("/pipelines?page=99999").status_code == 200
    response = client.get(
        "/compare?left=run-0000-unsafe:run-0000-unsafe-fixture-unsafe-lost-ack"
        "&right=run-0000-live:run-0000-live-fixture-live-lost-ack&step=zz&event=%3Cscript%3E"
    )
    assert response.status_code == 200
    assert "<script>" not in response.text.split("</head>", 1)[1]
