"""A real sweep: two targets x SQLite and PostgreSQL (with a password) x two experiments, end to end."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from acklab.console.index import VERIFIED, EvidenceIndex
from acklab.console.overview import heatmap
from acklab.evidence.bundle import find_bundles, load_manifest, verify
from acklab.evidence.validate import validate
from tests.harness.sweep.conftest import (
    PASSWORD,
    cell,
    every_byte_under,
    read,
    run_cli,
    sweep_dir,
    with_password,
)

pytestmark = [pytest.mark.slow, pytest.mark.postgres]
SVG = "{http://www.w3.org/2000/svg}"


@pytest.fixture(scope="module")
def swept(tmp_path_factory: pytest.TempPathFactory, postgres_server: Any) -> dict[str, Any]:
    """One sweep for the whole module (a few seconds): its process result, JSON and directory."""
    tmp = tmp_path_factory.mktemp("sweep")
    out, svg = tmp / "out", tmp / "copy" / "heatmap.svg"
    db = with_password(postgres_server, postgres_server.create_database())
    done = run_cli(
        "sweep",
        "--target", "fixture:live", "--target", "fixture:unsafe",
        "--db", "sqlite", "--db", db,
        "--experiment", "lost-ack", "--experiment", "db-reset",
        "--trials", "2", "--seed", "5",
        "--out", str(out), "--json", "--svg", str(svg),
    )  # fmt: skip
    return {"done": done, "out": out, "svg": svg, "result": json.loads(done.stdout or "{}")}


def test_the_unsafe_handler_fails_the_live_one_passes_and_the_exit_code_is_1(swept):
    done, result = swept["done"], swept["result"]
    assert done.returncode == 1, done.stderr[-3000:]
    assert result["verdict"] == "fail"
    cells = result["cells"]
    assert len(cells) == 2 * 2 * 2  # target x database x experiment
    for database in ("sqlite", "postgresql@"):
        live = cell(cells, "fixture:live", database, "lost-ack")
        unsafe = cell(cells, "fixture:unsafe", database, "lost-ack")
        assert (live["verdict"], live["trials"], live["passed"], live["violations"]) == ("pass", 2, 2, 0)
        assert (unsafe["verdict"], unsafe["trials"], unsafe["failed"]) == ("fail", 2, 2)
        assert unsafe["violations"] >= 2
        assert Path(unsafe["incident"]).is_file()
    # db-reset needs a TCP link to the database: skipped on SQLite with the reason, run on PostgreSQL.
    assert cell(cells, "fixture:live", "sqlite", "db-reset")["verdict"] == "skipped"
    assert cell(cells, "fixture:live", "postgresql@", "db-reset")["verdict"] == "pass"
    assert cell(cells, "fixture:unsafe", "postgresql@", "db-reset")["trials"] == 2
    assert set(result) == {"sweep_id", "verdict", "cells", "heatmap", "bundle"}
    assert {"target", "database", "experiment", "verdict", "trials", "passed", "failed", "errors"} <= set(
        cells[0]
    )


def test_sweep_json_validates_and_every_run_is_an_ordinary_intact_bundle_inside_the_sweep(swept):
    root = sweep_dir(swept["out"])
    doc = read(root / "sweep.json")
    validate("sweep", doc)
    assert (doc["status"], doc["verdict"], doc["seed"]) == ("complete", "fail", 5)
    assert load_manifest(root)["kind"] == "sweep"
    assert verify(root).ok
    assert len(doc["runs"]) == 4
    for run in doc["runs"]:
        bundle = root / run["bundle"]
        assert run["status"] == "complete"
        assert read(bundle / "run.json")["status"] == "complete"
        assert verify(bundle).ok
    # Runs on one database never share an event id: each run's seed is its own.
    assert len({run["seed"] for run in doc["runs"]}) == 4
    # The runs' journal rows and leases stay in the evidence directory, where janitor looks.
    assert (swept["out"] / "journal.sqlite").is_file()
    assert not (root / "journal.sqlite").exists()


def test_the_heatmap_is_svg_with_a_text_label_on_every_cell(swept):
    root = sweep_dir(swept["out"])
    data = (root / "heatmap.svg").read_bytes()
    assert swept["svg"].read_bytes() == data
    svg = ET.fromstring(data)
    cells = svg.findall(f".//{SVG}g[@class]") + svg.findall(f".//{SVG}a[@class]")
    assert len(cells) == 8
    words = {"".join(t.itertext()) for t in svg.iter(f"{SVG}text")}
    assert {
        "PASS",
        "FAIL",
        "SKIPPED",
        "lost-ack",
        "db-reset",
        "fixture:live",
        "fixture:unsafe",
        "sqlite",
    } <= words
    # The one heatmap renderer (evidence.heatmap) draws a cell as the console does: its pass
    # rate and counts; the tooltip spells them out.
    assert {"100% pass", "0% pass", "2 trials"} <= words
    titles = [c.findtext(f"{SVG}title", "") for c in cells]
    assert any(
        t.startswith("fixture:unsafe \u00b7 sqlite \u00d7 lost-ack: fail, 0/2 trials passed, 2 failed")
        for t in titles
    )


def test_the_password_in_db_is_never_written(swept):
    leaks = [str(path) for path, data in every_byte_under(swept["out"]) if PASSWORD.encode() in data]
    assert leaks == []
    assert PASSWORD not in swept["done"].stdout
    assert PASSWORD not in swept["done"].stderr
    doc = read(sweep_dir(swept["out"]) / "sweep.json")
    (postgres,) = [d for d in doc["databases"] if d["url"]]
    assert ":***@127.0.0.1:" in postgres["url"]


def test_the_console_indexes_the_sweeps_run_bundles(swept):
    out = swept["out"]
    index = EvidenceIndex(out)
    snapshot = index.snapshot()
    root = sweep_dir(out)
    assert {b.path for b in snapshot.bundles} == set(find_bundles(out))
    kinds = sorted(b.kind for b in snapshot.bundles)
    assert kinds == ["run", "run", "run", "run", "sweep"]
    assert all(b.path.parent == root for b in snapshot.bundles if b.kind == "run")
    assert all(index.integrity(b).status == VERIFIED for b in snapshot.bundles)
    grid = heatmap(snapshot)
    assert grid.cells[("fixture:unsafe", "lost-ack")].verdict == "fail"
    assert grid.cells[("fixture:live", "lost-ack")].verdict == "pass"
