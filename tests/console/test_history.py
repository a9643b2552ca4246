"""History across pipelines, from an evidence directory holding five pipelines' bundles (as
`acklab evidence pull --last 5` leaves them): verdict per pipeline, the flip, first failure,
flaky rows, each cell linking to its incident; live, in the snapshot, and in Chromium."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from datetime import timedelta
from html import unescape
from pathlib import Path

import pytest

from acklab.console.export import build_snapshot
from acklab.console.history import history
from acklab.console.index import EvidenceIndex
from tests.console.conftest import SCREENSHOTS, LiveServer, SubPathServer
from tests.console.handlers import handler_hash, write_repair, write_run
from tests.console.samples import BASE_TIME

PIPELINES = (101, 102, 103, 104, 105)
# fixture:live's lost-ack flips at 104 (its handler changed there) and stays red; its
# concurrent-duplicates failed once at 102 (flaky); replay always passes; fixture:unsafe
# always fails lost-ack.
LIVE = {
    "lost-ack": ("pass", "pass", "pass", "fail", "fail"),
    "concurrent-duplicates": ("pass", "fail", "pass", "pass", "pass"),
    "replay": ("pass",) * 5,
}


def write_pipelines(out: Path) -> Path:
    for n, pipeline in enumerate(PIPELINES):
        created = BASE_TIME + timedelta(days=n)
        root = out / f"pipeline-{pipeline}" / f"evidence-{pipeline * 10}"
        write_run(
            root / f"live-{pipeline}",
            run_id=f"live-{pipeline}",
            target="fixture:live",
            verdicts={e: verdicts[n] for e, verdicts in LIVE.items()},
            created=created,
            handler="live-v2" if pipeline >= 104 else "live-v1",
            seed=pipeline,
            pipeline=pipeline,
        )
        write_run(
            root / f"unsafe-{pipeline}",
            run_id=f"unsafe-{pipeline}",
            target="fixture:unsafe",
            verdicts={"lost-ack": "fail"},
            created=created,
            handler="unsafe",
            seed=pipeline,
            pipeline=pipeline,
        )
    # Neither a local run nor a repair's runs belong to a pipeline of the branch.
    write_run(
        out / "local",
        run_id="local",
        target="fixture:live",
        verdicts={"lost-ack": "error"},
        created=BASE_TIME,
        handler="x",
    )
    write_repair(out, created=BASE_TIME + timedelta(days=9))
    return out


@pytest.fixture(scope="module")
def pipelines(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_pipelines(tmp_path_factory.mktemp("history") / "out")


def test_history_rows_flip_first_failure_and_flaky(pipelines):
    found = history(EvidenceIndex(pipelines).snapshot())
    assert [p.pipeline_id for p in found.pipelines] == [str(p) for p in PIPELINES]
    rows = {(r.target, r.experiment): r for r in found.rows}
    assert sorted(rows) == [
        ("fixture:live", "concurrent-duplicates"),
        ("fixture:live", "lost-ack"),
        ("fixture:live", "replay"),
        ("fixture:unsafe", "lost-ack"),
    ]
    flip = rows["fixture:live", "lost-ack"]
    assert [c.verdict for c in flip.cells.values()] == list(LIVE["lost-ack"])
    assert [p for p, c in flip.cells.items() if c.flipped] == ["104"]
    assert (flip.first_failed, flip.failing_since, flip.flaky) == ("104", "104", True)
    assert flip.cells["104"].revisions == ("handler:" + handler_hash("live-v2"),)
    assert flip.cells["104"].incident.run_id == "live-104"
    once = rows["fixture:live", "concurrent-duplicates"]
    assert (once.first_failed, once.failing_since, once.flaky) == ("102", None, True)
    assert [p for p, c in once.cells.items() if c.flipped] == ["102", "103"]
    steady = rows["fixture:live", "replay"]
    assert (steady.first_failed, steady.failing_since, steady.flaky) == (None, None, False)
    red = rows["fixture:unsafe", "lost-ack"]
    assert (red.first_failed, red.failing_since, red.flaky) == ("101", "101", False)
    # the local run's error and the repair's runs are not part of any pipeline's cell
    assert all(c.verdict != "error" for r in found.rows for c in r.cells.values())
    assert all(not c.incident.run_id.startswith("flow-") for r in found.rows for c in r.cells.values())


def test_a_pipelines_shards_combine_into_one_cell(tmp_path):
    out = tmp_path / "out"
    for shard, verdict in ((1, "pass"), (2, "fail")):
        write_run(
            out / f"s{shard}",
            run_id=f"s{shard}",
            target="svc",
            verdicts={"lost-ack": verdict},
            created=BASE_TIME + timedelta(minutes=shard),
            handler="h",
            pipeline=9,
        )
    [row] = history(EvidenceIndex(out).snapshot()).rows
    cell = row.cells["9"]
    assert (cell.verdict, cell.count, cell.incident.run_id) == ("fail", 2, "s2")  # a failure anywhere counts


def test_the_history_page_links_every_cell_to_its_incident(client_for, pipelines):
    html = client_for(pipelines).get("/history").text
    text = " ".join(unescape(html).split())
    assert "4 target \u00d7 experiment rows across 5 pipelines \u00b7 2 failing now \u00b7 2 flaky" in text
    assert text.count(">FLAKY<") == 2
    cells = re.findall(
        r'<td class="history-cell( flipped)?" data-pipeline="(\d+)">\s*<a href="([^"]+)"', html
    )
    assert len(cells) == 3 * 5 + 5  # live's three experiments and unsafe's lost-ack, five pipelines each
    assert sum(1 for flipped, _, _ in cells if flipped) == 3
    for _, pipeline, href in cells:
        assert href.startswith("/bundles/pipeline-" + pipeline)
        assert "/incidents/" in href
    assert "first failed" in text
    assert "#104" in text


def test_an_evidence_directory_without_pipelines_says_how_to_get_history(client_for, tmp_path):
    out = tmp_path / "out"
    write_run(
        out / "r", run_id="r", target="svc", verdicts={"lost-ack": "pass"}, created=BASE_TIME, handler="h"
    )
    html = client_for(out).get("/history").text
    assert "No pipeline history yet" in html
    assert "acklab evidence pull" in html


def test_pages_builds_the_history_from_a_read_only_evidence_directory(pipelines, tmp_path):
    """`acklab pages` (and the history in it) never writes to the evidence: run with the
    directory read-only and without the capabilities that let root write anyway."""
    evidence = Path(shutil.copytree(pipelines, tmp_path / "ro"))
    public = tmp_path / "public"
    for path in [evidence, *evidence.rglob("*")]:
        path.chmod(0o555 if path.is_dir() else 0o444)
    try:
        done = subprocess.run(
            ["setpriv", "--bounding-set", "-dac_override,-dac_read_search,-fowner", "--", sys.executable,
             "-c", "from acklab.cli import main; main()", "pages", "--evidence", str(evidence), "--out", str(public)],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
    finally:
        for path in [evidence, *evidence.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)
    assert done.returncode == 0, done.stderr
    page = (public / "history" / "index.html").read_text()
    assert "2 flaky" in unescape(page)


@pytest.mark.browser
@pytest.mark.slow
def test_the_history_in_chromium_live_and_static(browser, pipelines, tmp_path):
    public = tmp_path / "public"
    build_snapshot(pipelines, public, env={"CI_PIPELINE_ID": "106"})
    with LiveServer(pipelines) as live, SubPathServer(public, "/group/project/") as static:
        for name, url in (("live", f"{live.url}/history"), ("static", static.url + "history/index.html")):
            context = browser.new_context(viewport={"width": 1300, "height": 900})
            try:
                page = context.new_page()
                errors: list[str] = []
                page.on("console", lambda m, into=errors: into.append(m.text) if m.type == "error" else None)
                page.on("pageerror", lambda exc, into=errors: into.append(str(exc)))
                page.goto(url)
                flipped = page.locator("td.history-cell.flipped")
                assert flipped.count() == 3
                assert page.locator("tr.row-flaky").count() == 2
                row = page.locator("tr", has=page.locator("th", has_text="fixture:live")).filter(
                    has_text="lost-ack"
                )
                assert row.locator("td.history-cell .badge").all_inner_texts() == ["PASS"] * 3 + ["FAIL"] * 2
                assert row.locator(".flaky").count() == 1
                assert row.locator("td.flipped").get_attribute("data-pipeline") == "104"
                page.screenshot(path=str(SCREENSHOTS / f"history-{name}.png"), full_page=True)
                with page.expect_navigation():
                    row.locator("td[data-pipeline='104'] a").click()
                assert "/incidents/" in page.url
                assert "live-104" in page.inner_text("main")
                assert errors == []
            finally:
                context.close()
