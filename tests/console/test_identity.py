"""One identity per handler: the overview keys its cells by target + revision, a repair flow's
head and patched runs sit under their trail, and every row names its revision."""

from __future__ import annotations

import json
from datetime import timedelta
from html import unescape
from pathlib import Path

import pytest

from acklab.console.compare import pair_table
from acklab.console.identity import Identity, revision_of, short_revision, trail_runs
from acklab.console.index import EvidenceIndex
from acklab.console.overview import heatmap, overview_grids
from acklab.evidence.documents.incident import IncidentTarget
from acklab.evidence.documents.trail import TrailDocument
from tests.console.handlers import handler_hash, write_repair, write_run
from tests.console.samples import BASE_TIME

EXPERIMENTS = ("lost-ack", "concurrent-duplicates")


@pytest.fixture(scope="module")
def repaired(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo's evidence: unsafe and live side by side, then the repair story (newer)."""
    out = tmp_path_factory.mktemp("repaired") / "out"
    for target, handler, verdict in (("fixture:unsafe", "unsafe", "fail"), ("fixture:live", "live", "pass")):
        write_run(
            out / f"main-{handler}",
            run_id=f"main-{handler}",
            target=target,
            verdicts=dict.fromkeys(EXPERIMENTS, verdict),
            created=BASE_TIME,
            handler=handler,
            seed=99,
        )
    write_repair(out, created=BASE_TIME + timedelta(hours=1))
    return out


def target(**fields: object) -> IncidentTarget:
    return IncidentTarget.model_validate({"name": "t", "kind": "spec", "endpoint": "http://x", **fields})


def test_the_revision_is_the_handler_hash_else_the_commit():
    digest = "ab" * 32
    assert revision_of(target(handler_sha256=digest, commit_sha="c" * 40)) == f"handler:{digest}"
    assert revision_of(target(commit_sha="C" * 40, dirty=True)) == "c" * 40 + "+dirty"  # an older bundle
    changes = "3fa1c2" + "0" * 58
    assert revision_of(target(commit_sha="c" * 40, dirty=True, changes=changes)) == f"{'c' * 40}+{changes}"
    assert revision_of(target(commit_sha="c" * 40, dirty=False, changes=changes)) == "c" * 40
    assert short_revision(f"{'b02f02d7' * 5}+{changes}") == "commit b02f02d7+3fa1c2"
    assert revision_of(target(commit_sha=None)) is None
    assert revision_of(target(commit_sha="main; rm -rf /")) is None  # not hex: no identity
    assert short_revision(f"handler:{digest}") == "handler abababab"
    assert short_revision("0123456789abcdef+dirty") == "commit 01234567+dirty"
    assert short_revision(None) == "revision unknown"
    assert Identity("fixture:live", None).label == "fixture:live @ revision unknown"


def test_a_trail_names_its_head_and_patched_runs(repaired):
    index = EvidenceIndex(repaired)
    trail = index.snapshot().by_key["flow-repair"]
    assert trail.flow_runs == {
        "flow-head-1": ("head", "reproduce"),
        "flow-patched-1": ("patched", "verify"),
        "flow-head-2": ("head", "strike-again"),
        "flow-patched-2": ("patched", "strike-again"),
    }
    # outputs that hold no lab run (a hand-edited trail, another shape) name none
    cleared = [
        c.but(outputs={"lab_run_id": 3, "before": "not a dict"}) for c in trail_doc(repaired).checkpoints
    ]
    assert trail_runs(trail_doc(repaired).but(checkpoints=cleared)) == {}


def trail_doc(evidence: Path) -> TrailDocument:
    return TrailDocument.read(json.loads((evidence / "flow-repair" / "trail.json").read_text()))


def test_the_live_cell_keeps_the_live_handlers_verdict_after_the_repair_story(repaired):
    snapshot = EvidenceIndex(repaired).snapshot()
    grid = heatmap(snapshot)
    # The sandbox's head (the unsafe handler under the live name) ran last, and failed; the
    # live handler's own cell still shows the live handler's verdict.
    for experiment in EXPERIMENTS:
        cell = grid.cells[("fixture:live", experiment)]
        assert (cell.verdict, cell.run_id) == ("pass", "main-live")
    assert [(r.target, r.short) for r in grid.rows] == [
        ("fixture:unsafe", "handler " + handler_hash("unsafe")[:8]),
        ("fixture:live", "handler " + handler_hash("live")[:8]),
    ]
    assert all(i.run_id.startswith("main-") for i in grid.by_row.values())

    [(trail, runs)] = overview_grids(snapshot).trails
    assert trail.key == "flow-repair"
    assert [(r.role, r.target, r.short) for r in runs.rows] == [
        ("head", "fixture:live", "handler " + handler_hash("unsafe")[:8]),
        ("patched", "fixture:live", "handler " + handler_hash("repaired")[:8]),
    ]
    verdicts = {(row.role, e): i.verdict for (row, e), i in runs.by_row.items()}
    assert verdicts == {
        ("head", "lost-ack"): "fail",
        ("head", "concurrent-duplicates"): "fail",
        ("patched", "lost-ack"): "pass",
        ("patched", "concurrent-duplicates"): "pass",
    }


def test_the_overview_shows_the_trail_runs_and_every_rows_revision(client_for, repaired):
    html = unescape(client_for(repaired).get("/").text)
    main = html[html.index('id="heatmap-h"') : html.index('id="trails-h"')]
    trails = html[html.index('id="trails-h"') : html.index('id="latency-h"')]
    assert "flow-head" not in main
    assert "flow-patched" not in main
    assert 'href="/bundles/flow-repair/trail"' in trails
    assert "head: fixture:live" in trails
    assert "patched: fixture:live" in trails
    for handler in ("unsafe", "live"):
        assert f"handler {handler_hash(handler)[:8]}" in main
    for handler in ("unsafe", "repaired"):
        assert f"handler {handler_hash(handler)[:8]}" in trails
    assert "fixture:live @ handler " + handler_hash("live")[:8] + " \u00d7 lost-ack: pass" in main
    runs = html[html.index('id="runs-h"') :]
    assert runs.count(">repair head<") == 2
    assert runs.count(">repair patched<") == 2
    assert runs.count("<code>handler ") == 6  # every run bundle's row names its handler


def test_another_revision_of_a_target_never_shares_its_row(tmp_path):
    out = tmp_path / "out"
    old = {"lost-ack": "fail", "replay": "pass"}
    write_run(out / "old", run_id="old", target="svc", verdicts=old, created=BASE_TIME, handler="v1")
    new = {"lost-ack": "pass"}
    write_run(
        out / "new",
        run_id="new",
        target="svc",
        verdicts=new,
        created=BASE_TIME + timedelta(hours=1),
        handler="v2",
    )
    grids = overview_grids(EvidenceIndex(out).snapshot())
    # the newest revision has the row, with only what it ran: replay is not borrowed from v1
    assert {(r.short, e): i.verdict for (r, e), i in grids.main.by_row.items()} == {
        ("handler " + handler_hash("v2")[:8], "lost-ack"): "pass"
    }
    assert {(r.short, e): i.verdict for (r, e), i in grids.older.by_row.items()} == {
        ("handler " + handler_hash("v1")[:8], "lost-ack"): "fail",
        ("handler " + handler_hash("v1")[:8], "replay"): "pass",
    }


def test_a_repairs_head_and_patch_pair_up_in_the_comparison(repaired):
    pairs = pair_table(EvidenceIndex(repaired).snapshot())
    flow_pairs = [(p.experiment, p.left.run_id, p.right.run_id) for p in pairs if p.seed == 7]
    assert sorted(flow_pairs) == [
        ("concurrent-duplicates", "flow-head-2", "flow-patched-2"),
        ("lost-ack", "flow-head-1", "flow-patched-1"),
    ]
    main_pairs = [(p.experiment, p.left.target, p.right.target) for p in pairs if p.seed == 99]
    assert sorted(main_pairs) == [(e, "fixture:unsafe", "fixture:live") for e in sorted(EXPERIMENTS)]
