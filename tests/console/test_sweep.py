"""The console over a real `acklab sweep`: the sweep page, its links into the nested runs, a sweep
in progress, a hand-edited sweep.json, and the static snapshot of it."""

from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess
import sys
from html import unescape
from pathlib import Path
from typing import Any

import pytest

from acklab.console.export import build_snapshot
from acklab.console.index import INCOMPLETE, VERIFIED, EvidenceIndex
from acklab.console.links import LiveLinks
from acklab.console.scan import bundle_key
from acklab.console.sweep import incident_href, nested_bundles
from acklab.evidence.documents.sweep import SweepCell
from acklab.evidence.validate import validate
from tests.console.conftest import LiveServer, SubPathServer
from tests.console.samples import XSS_ATTR, XSS_SCRIPT
from tests.console.test_browser import watched

pytestmark = pytest.mark.slow
ACKLAB = Path(sys.executable).parent / "acklab"


@pytest.fixture(scope="module")
def swept(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One real sweep for the module: fixture:live and fixture:unsafe x lost-ack, one trial."""
    out = tmp_path_factory.mktemp("sweep") / "out"
    done = subprocess.run(
        [str(ACKLAB), "sweep", "--target", "fixture:live", "--target", "fixture:unsafe",
         "--experiment", "lost-ack", "--trials", "1", "--out", str(out), "--json"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr  # the unsafe handler fails lost-ack
    result = json.loads(done.stdout)
    root = Path(result["bundle"])
    doc = json.loads((root / "sweep.json").read_text(encoding="utf-8"))
    return {"out": out, "root": root, "doc": doc, "key": bundle_key(root.relative_to(out).as_posix())}


def text_of(html: str) -> str:
    return re.sub(r"\s+", " ", unescape(re.sub(r"<[^>]+>", " ", html)))


def links_in(html: str) -> list[str]:
    return [unescape(h) for h in re.findall(r'href="([^"]+)"', html)]


def cell_links(html: str) -> list[str]:
    return [unescape(h) for h in re.findall(r'<a href="([^"]+)" class="cell ', html)]


def run_keys(swept: dict[str, Any]) -> dict[str, str]:
    """target -> the console key of its nested run bundle (`<sweep_key>~<run_id>`)."""
    return {r["target"]: f"{swept['key']}~{r['run_id']}" for r in swept["doc"]["runs"]}


def test_a_sweep_is_indexed_as_a_sweep_with_its_runs_nested_under_its_key(swept):
    index = EvidenceIndex(swept["out"])
    snapshot = index.snapshot()
    sweep = snapshot.by_key[swept["key"]]
    assert sweep.kind == "sweep"
    assert sweep.sweep is not None
    assert (sweep.sweep.verdict, sweep.sweep.status, sweep.sweep.runs) == ("fail", "complete", 2)
    assert index.integrity(sweep).status == VERIFIED
    nested = nested_bundles(snapshot, sweep)
    assert {b.key for b in nested.values()} == set(run_keys(swept).values())
    assert all(i.database == "sqlite" for b in nested.values() for i in b.incidents)


def test_the_sweep_page_draws_the_heatmap_with_cells_linking_the_nested_incidents(client_for, swept):
    client = client_for(swept["out"])
    response = client.get(f"/bundles/{swept['key']}")
    assert response.status_code == 200
    html = response.text
    assert "<?xml" not in html
    svg = html[html.index("<svg") : html.index("</svg>")]
    assert " style=" not in svg
    assert "acklab sweep " + swept["doc"]["sweep_id"] in svg
    keys = run_keys(swept)
    cells = cell_links(html)
    assert len(cells) == 2
    for target, verdict in (("fixture:live", "PASS"), ("fixture:unsafe", "FAIL")):
        (link,) = [c for c in cells if c.startswith(f"/bundles/{keys[target]}/incidents/")]
        incident = client.get(link)
        assert incident.status_code == 200, link
        assert f"lost-ack against {target}" in text_of(incident.text)
        assert verdict in incident.text
        assert f'href="/bundles/{keys[target]}"' in html  # the runs table
    assert "sweep.json" in html
    assert "heatmap.svg" in html


def test_a_nested_run_links_back_to_its_sweep(client_for, swept):
    client = client_for(swept["out"])
    html = client.get(f"/bundles/{run_keys(swept)['fixture:unsafe']}").text
    assert f'href="/bundles/{swept["key"]}">sweep' in html
    overview = client.get("/").text
    assert "2 targets \u00d7 1 database" in overview


def pending(doc: dict[str, Any]) -> dict[str, Any]:
    """sweep.json as the harness writes it before the first run starts."""
    early = copy.deepcopy(doc)
    early.update(status="interrupted", verdict="error")
    for run in early["runs"]:
        run.update(run_id=None, bundle=None, status="pending", verdict=None)
    for cell in early["cells"]:
        cell.update(verdict="pending", trials=0, passed=0, failed=0, errors=0, violations=0,
                    pass_rate=None, run_id=None, incident=None)  # fmt: skip
    validate("sweep", early)
    return early


def test_a_sweep_in_progress_appears_before_its_manifest_and_updates(client_for, swept, tmp_path):
    out = tmp_path / "out"
    root = out / swept["root"].name
    root.mkdir(parents=True)
    (root / "sweep.json").write_text(json.dumps(pending(swept["doc"])), encoding="utf-8")
    client = client_for(out)
    page = client.get(f"/bundles/{swept['key']}")
    assert page.status_code == 200
    assert "Incomplete bundle" in page.text
    assert "acklab sweep --resume " + swept["doc"]["sweep_id"] in unescape(page.text)
    assert "PENDING" in page.text
    assert "not started" in page.text
    assert cell_links(page.text) == []
    assert "(interrupted)" in client.get("/").text

    for run in swept["doc"]["runs"]:  # the runs finish; sweep.json is rewritten
        shutil.copytree(swept["root"] / run["bundle"], root / run["bundle"])
    (root / "sweep.json").write_text(json.dumps(swept["doc"]), encoding="utf-8")
    page = client.get(f"/bundles/{swept['key']}")
    assert len(cell_links(page.text)) == 2
    assert "PENDING" not in page.text
    index = EvidenceIndex(out)
    assert index.integrity(index.snapshot().by_key[swept["key"]]).status == INCOMPLETE


def test_a_hand_edited_sweep_json_shows_its_problems_and_no_heatmap(client_for, swept, tmp_path):
    out = Path(shutil.copytree(swept["out"], tmp_path / "out"))
    root = out / swept["root"].relative_to(swept["out"])
    doc = copy.deepcopy(swept["doc"])
    del doc["cells"][0]["verdict"]
    doc["targets"] = [XSS_SCRIPT, XSS_ATTR]
    (root / "sweep.json").write_text(json.dumps(doc), encoding="utf-8")
    html = client_for(out).get(f"/bundles/{swept['key']}").text
    assert "does not validate against sweep.schema.json" in html
    assert "<svg" not in html.split('id="runs-h"')[0].split('id="matrix-h"')[1]
    assert "integrity warning" in html
    assert XSS_SCRIPT not in html
    assert XSS_ATTR not in html
    (root / "sweep.json").write_text("{not json", encoding="utf-8")
    assert "sweep.json: unreadable" in client_for(out).get(f"/bundles/{swept['key']}").text


def test_hostile_names_in_a_valid_sweep_json_stay_text(client_for, swept, tmp_path):
    out = Path(shutil.copytree(swept["out"], tmp_path / "out"))
    root = out / swept["root"].relative_to(swept["out"])
    doc = copy.deepcopy(swept["doc"])
    for cell in doc["cells"]:
        cell["target"] += XSS_SCRIPT
        cell["experiment"] += XSS_ATTR
    doc["experiments"] = [e + XSS_ATTR for e in doc["experiments"]]
    validate("sweep", doc)
    (root / "sweep.json").write_text(json.dumps(doc), encoding="utf-8")
    html = client_for(out).get(f"/bundles/{swept['key']}").text
    assert "<svg" in html
    assert XSS_SCRIPT not in html
    assert XSS_ATTR not in html


def test_cell_links_only_reach_incidents_the_index_found_inside_the_sweep(swept):
    snapshot = EvidenceIndex(swept["out"]).snapshot()
    nested = nested_bundles(snapshot, snapshot.by_key[swept["key"]])
    href = incident_href(nested, _Links())
    cell = SweepCell.read(swept["doc"]["cells"][0])
    assert href(cell) == f"incident {run_keys(swept)[cell.target]}"
    run = (cell.incident or "").split("/")[0]
    for incident in (None, "", "../" + (cell.incident or ""), f"{run}/incidents/missing.json",
                     f"{run}/trials/lost-ack-0000.json", "/etc/passwd", (cell.incident or "").split("/", 1)[1]):  # fmt: skip
        assert href(cell.but(incident=incident)) is None, incident


class _Links(LiveLinks):
    """Names the incident a link would open, whatever the URL scheme."""

    def incident(self, key: str, incident_id: str, page: int = 1) -> str:
        return f"incident {key}"


def test_the_snapshot_draws_the_sweep_with_relative_links(swept, tmp_path):
    public = tmp_path / "public"
    build_snapshot(swept["out"], public, env={})
    page = public / "bundles" / swept["key"] / "index.html"
    html = page.read_text(encoding="utf-8")
    cells = cell_links(html)
    assert len(cells) == 2
    for link in cells + [h for h in links_in(html) if h.startswith("../")]:
        assert not link.startswith("/")
        assert (page.parent / link.split("#")[0]).resolve().is_file(), link
    assert all(any(f"{key}/incidents/" in c for c in cells) for key in run_keys(swept).values())


@pytest.mark.browser
def test_the_sweep_page_renders_cleanly_live_and_in_the_snapshot(browser, swept, tmp_path):
    public = tmp_path / "public"
    build_snapshot(swept["out"], public, env={})
    with LiveServer(swept["out"]) as live, SubPathServer(public, "/group/project/") as site:
        for url in (f"{live.url}/bundles/{swept['key']}", f"{site.url}bundles/{swept['key']}/index.html"):
            with watched(browser) as w:
                w.open(url)
                assert w.page.locator("main h1").inner_text().startswith("Sweep")
                assert w.page.locator(".sweep-heatmap svg a.cell").count() == 2
                w.shot("live-sweep" if url.startswith(live.url) else "static-sweep")
                with w.page.expect_navigation():
                    w.page.click(".sweep-heatmap a.cell.fail")
                assert "incident" in w.page.inner_text(".crumbs")
                assert "fixture:unsafe" in w.page.inner_text("main")
                w.assert_clean()
