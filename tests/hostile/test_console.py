"""Hostile input (docs/hostile-input.md): the console treats evidence as hostile.

A nested, oversized or undecodable document shows as a broken bundle with the reason, at
start and when planted while the console runs; symbolic links in a bundle are never followed
(live, pages, raw route) and `evidence verify` calls them integrity failures; an incident's
deliveries are paged; the live console answers only to the host names it serves.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from anyio.from_thread import BlockingPortal, start_blocking_portal

from acklab.console.app import create_app
from acklab.console.details import DELIVERIES_PER_PAGE
from acklab.console.export import build_snapshot
from acklab.console.security import served_hosts
from acklab.evidence.bundle import BundleWriter
from tests.console.conftest import AppClient
from tests.evidence.factories import incident, trial, write_run_bundle
from tests.hostile.conftest import write

SECRET = "TOP-SECRET-OUTSIDE-THE-EVIDENCE"


@pytest.fixture(scope="module")
def portal() -> Iterator[BlockingPortal]:
    with start_blocking_portal() as portal:
        yield portal


@pytest.fixture
def console(portal: BlockingPortal) -> Iterator[Any]:
    clients: list[AppClient] = []

    def make(evidence: Path, **kwargs: Any) -> AppClient:
        client = AppClient(create_app(evidence, refresh_interval=0.0, **kwargs), portal)
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.close()


def nested_file(path: Path, size: int = 200_000) -> Path:
    """About `size` bytes of nesting: what stopped the console from starting."""
    return write(path, "[" * (size // 2) + "]" * (size // 2))


def test_a_nested_document_at_start_shows_a_broken_bundle_and_the_console_starts(evidence, console):
    nested_file(evidence / "r1" / "incidents" / "lost-ack.json")
    nested_file(evidence / "r2" / "run.json")
    client = console(evidence)
    overview = client.get("/")
    assert overview.status_code == 200
    for key, name in (("r1", "lost-ack.json"), ("r2", "run.json")):
        page = client.get(f"/bundles/{key}")
        assert page.status_code == 200
        assert f"{name}: unreadable (nests deeper than 64 levels; acklab refuses it)" in page.text


def test_a_document_planted_while_the_console_runs_breaks_only_its_bundle(tmp_path, evidence, console):
    client = console(evidence)
    assert client.get("/bundles/r1").status_code == 200
    nested_file(evidence / "r1" / "manifest.json")
    write(evidence / "r2" / "incidents" / "lost-ack.json", b"\xff\xfe{\x00")  # UTF-16, not UTF-8
    for url in ("/", "/bundles/r1", "/bundles/r2", "/pipelines", "/compare"):
        assert client.get(url).status_code == 200, url
    assert "nests deeper than 64 levels" in client.get("/bundles/r1").text
    assert "is UTF-16" in client.get("/bundles/r2").text
    write_run_bundle(evidence / "r3", "r3", {"replay": [(0, "pass")]})  # new evidence still shows
    assert client.get("/bundles/r3").status_code == 200
    assert "r3" in client.get("/").text


def test_an_oversized_document_is_a_reason_not_a_stall(evidence, console):
    with (evidence / "r1" / "run.json").open("w") as fh:  # 65 MiB, written in pieces
        fh.write('{"pad": "')
        for _ in range(65):
            fh.write("z" * (1 << 20))
        fh.write('"}')
    page = console(evidence).get("/bundles/r1")
    assert page.status_code == 200
    assert "run.json: unreadable (is 65.0 MiB; acklab reads at most 64.0 MiB" in page.text


def plant_links(bundle: Path, target: Path) -> None:
    for name in ("run.json", "trail.json", "notes.txt"):
        (bundle / name).unlink(missing_ok=True)
        (bundle / name).symlink_to(target)
    (bundle / "manifest.json").rename(bundle / "real-manifest.json")
    (bundle / "manifest.json").symlink_to(bundle / "real-manifest.json")
    (bundle / "incidents" / "linked").symlink_to(target.parent, target_is_directory=True)


def test_symlinks_in_a_bundle_are_never_followed(tmp_path, evidence, console, acklab):
    outside = write(tmp_path / "elsewhere" / "secret.json", json.dumps({"run_id": SECRET, "verdict": SECRET}))
    plant_links(evidence / "r1", outside)
    client = console(evidence)
    for url in ("/", "/bundles/r1", "/bundles/r1/trail", "/bundles/r1/pipeline", "/pipelines"):
        response = client.get(url)
        assert SECRET not in response.text, url
    for rel in ("run.json", "trail.json", "manifest.json", "notes.txt", "incidents/linked/secret.json"):
        assert client.get(f"/raw/r1/{rel}").status_code == 404, rel
    assert "symbolic link" in client.get("/bundles/r1/pipeline").text
    public = tmp_path / "public"
    build_snapshot(evidence, public, env={})
    for page in public.rglob("*"):
        if page.is_file():
            assert SECRET.encode() not in page.read_bytes(), page
    code, out, _ = acklab("evidence", "verify", evidence / "r1")
    assert code == 7
    assert "manifest.json is a symbolic link" in out
    assert "symlink: run.json" in out


def test_a_symlinked_incidents_directory_lists_nothing_from_elsewhere(tmp_path, evidence, console):
    elsewhere = tmp_path / "elsewhere-incidents"
    elsewhere.mkdir()
    planted = json.loads((evidence / "r1" / "incidents" / "lost-ack.json").read_text())
    planted["verdict"] = SECRET
    write(elsewhere / "planted.json", json.dumps(planted))
    (evidence / "r2" / "reports").rename(tmp_path / "r2-reports")
    (evidence / "r2" / "reports").symlink_to(elsewhere, target_is_directory=True)
    real = evidence / "r2" / "incidents"
    real.rename(tmp_path / "r2-incidents")
    real.symlink_to(elsewhere, target_is_directory=True)
    client = console(evidence)
    for url in ("/", "/bundles/r2", "/bundles/r2/pipeline", "/bundles/r2/incidents/lost-ack"):
        assert SECRET not in client.get(url).text, url
    assert client.get("/bundles/r2/incidents/planted").status_code == 404


def test_verify_reports_an_added_symlink_as_an_integrity_failure(tmp_path, evidence, acklab):
    outside = write(tmp_path / "elsewhere" / "x.json", "{}")
    (evidence / "r2" / "incidents" / "extra.json").symlink_to(outside)
    code, out, _ = acklab("evidence", "verify", evidence / "r2")
    assert code == 7, out
    assert "symlink: incidents/extra.json" in out
    assert "intact" not in out.replace("NOT INTACT", "")


def paged_bundle(out: Path, *, trials: int, per_trial: int, pad: int = 0) -> Path:
    """A bundle whose one incident holds trials x per_trial deliveries (pad: bytes of excerpt each)."""
    writer = BundleWriter(out / "big")
    made = []
    for index in range(trials):
        t = trial("big", "lost-ack", index)
        template = t["deliveries"][0]
        t["deliveries"] = []
        for seq in range(per_trial):
            d = copy.deepcopy(template)
            d.update(seq=seq, response_excerpt=f"delivery-{index}-{seq}-" + "p" * pad)
            t["deliveries"].append(d)
        made.append(t)
    writer.write_json("incidents/lost-ack.json", incident("big", "lost-ack", made), kind="incident")
    writer.finalize(env={})
    return out / "big"


@pytest.mark.parametrize("pad", [0, 1500], ids=["small-file", "walked-file"])
def test_an_incident_pages_its_deliveries(tmp_path, console, pad):
    bundle = paged_bundle(tmp_path / "out", trials=5, per_trial=230, pad=pad)
    size = (bundle / "incidents" / "lost-ack.json").stat().st_size
    assert (size > 1 << 20) == bool(pad)  # both reading paths: parsed whole, and walked
    client = console(tmp_path / "out")
    first = client.get("/bundles/big/incidents/lost-ack")
    assert first.status_code == 200
    assert first.text.count("delivery-0-") == DELIVERIES_PER_PAGE
    assert "Deliveries 1\u2013200 of 1150." in first.text
    assert "page 1 of 6" in first.text
    assert 'href="/bundles/big/incidents/lost-ack?page=2"' in first.text
    third = client.get("/bundles/big/incidents/lost-ack?page=3").text
    # Deliveries 401-600: trial 1's last 60 and trial 2's first 140.
    assert "delivery-1-169-" not in third
    assert third.count("delivery-1-") == 60
    assert third.count("delivery-2-") == 140
    assert "(here 171\u2013230)" in third
    last = client.get("/bundles/big/incidents/lost-ack?page=999").text
    assert "page 6 of 6" in last
    assert last.count("delivery-4-") == 150
    public = tmp_path / "public"
    build_snapshot(tmp_path / "out", public, env={})
    assert (public / "bundles" / "big" / "incidents" / "lost-ack" / "page-6.html").is_file()
    assert (
        'href="lost-ack/page-2.html"'
        in (public / "bundles" / "big" / "incidents" / "lost-ack.html").read_text()
    )


def test_the_console_answers_only_to_the_hosts_it_serves(evidence, console):
    client = console(evidence)
    for host in ("127.0.0.1:8000", "localhost:8000", "[::1]:8000", "LOCALHOST"):
        assert client.get("/", headers={"Host": host}).status_code == 200, host
    for host in ("evil.example:8000", "127.0.0.1.evil.example", "", "attacker.test"):
        response = client.get("/raw/r1/run.json", headers={"Host": host})
        assert response.status_code == 421, host
        assert b"run_id" not in response.content
    named = console(evidence, hosts=served_hosts("0.0.0.0", ["lab.internal"]))
    assert named.get("/", headers={"Host": "lab.internal:8000"}).status_code == 200
    assert named.get("/", headers={"Host": "other.internal"}).status_code == 421


def test_control_characters_in_evidence_reach_pages_escaped(evidence, console):
    run = json.loads((evidence / "r1" / "run.json").read_text())
    run["target"] = "evil\x1b]0;pwned\x07<script>window.__xss=1</script>"
    (evidence / "r1" / "run.json").write_text(json.dumps(run))
    page = console(evidence).get("/bundles/r1").text
    assert "<script>window.__xss" not in page
    assert "&lt;script&gt;" in page
    assert os.path.exists(evidence / "r1" / "run.json")
