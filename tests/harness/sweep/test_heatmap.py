"""evidence.heatmap: a standalone SVG document with a text label on every cell, names escaped."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from acklab.evidence.heatmap import HeatCell, describe, render_heatmap

SVG = "{http://www.w3.org/2000/svg}"


def parse(document: str) -> ET.Element:
    assert document.startswith('<?xml version="1.0" encoding="UTF-8"?>\n<svg ')
    return ET.fromstring(document.encode())


def texts(svg: ET.Element) -> list[str]:
    return ["".join(t.itertext()) for t in svg.iter(f"{SVG}text")]


def test_every_cell_says_its_verdict_rate_and_counts_in_text():
    cells = [
        HeatCell("live\nsqlite", "lost-ack", "pass", trials=4, passed=4),
        HeatCell("unsafe\nsqlite", "lost-ack", "fail", trials=4, passed=1, failed=3, violations=5),
        HeatCell("unsafe\nsqlite", "db-reset", "skipped", note="needs a TCP link to the database"),
    ]
    svg = parse(render_heatmap(cells, title="sweep s: fail"))
    words = texts(svg)
    assert {"PASS", "FAIL", "SKIPPED", "100% pass", "25% pass", "live", "unsafe", "sqlite"} <= set(words)
    assert {"4 trials", "5 violations", "0 violations"} <= set(words)
    assert "needs a TCP" in words  # the reason, wrapped to the cell
    assert "link to the" in words
    assert "not run" in words  # live x db-reset has no cell
    assert svg.get("role") == "img"
    assert svg.findtext(f"{SVG}title") == "sweep s: fail"
    titles = [g.findtext(f"{SVG}title") for g in svg.iter(f"{SVG}g")]
    assert (
        "unsafe \u00b7 sqlite \u00d7 lost-ack: fail, 1/4 trials passed, 3 failed, 0 errors, 5 violations"
        in titles
    )


def test_hostile_names_stay_text():
    evil = '<script>alert("x")</script>&'
    document = render_heatmap([HeatCell(evil, evil + "'", "fail", 1, 0, 1, href='a.json?"><x')], title=evil)
    svg = parse(document)
    assert "<script>" not in document
    assert not list(svg.iter(f"{SVG}script"))
    assert evil in texts(svg)
    (link,) = svg.iter(f"{SVG}a")
    assert link.get("href") == 'a.json?"><x'


def test_columns_follow_the_given_order_and_no_cells_is_still_a_document():
    cells = [HeatCell("t", "b", "pass", 1, 1), HeatCell("t", "a", "pass", 1, 1)]
    svg = parse(render_heatmap(cells, columns=["a", "b"]))
    heads = [w for w in texts(svg) if w in ("a", "b")]
    assert heads == ["a", "b"]
    assert "no cells" in texts(parse(render_heatmap([])))
    inline = render_heatmap(cells, declaration=False)
    assert inline.startswith("<svg ")
    assert ET.fromstring(inline).get("role") == "img"


def test_describe_reads_as_a_sentence():
    assert describe(HeatCell("t", "e", "pending")) == "t \u00d7 e: pending"
    assert describe(HeatCell("t", "e", "error", note="db down")) == "t \u00d7 e: error \u2014 db down"


def test_a_sweep_document_draws_with_links_the_reader_chooses():
    from acklab.evidence.documents.sweep import SweepDocument
    from acklab.evidence.heatmap import sweep_heatmap

    cells = [
        {"target": "fixture:live", "database": "sqlite", "experiment": "lost-ack", "verdict": "pass",
         "trials": 2, "passed": 2, "failed": 0, "errors": 0, "violations": 0, "incident": "r1/incidents/i.json"},
    ]  # fmt: skip
    doc = SweepDocument.read(
        {"schema": "acklab/sweep/v1", "sweep_id": "s", "status": "complete", "verdict": "pass", "seed": 7,
         "trials_per_experiment": 2, "targets": ["fixture:live"], "databases": [{"label": "sqlite", "url": None}],
         "experiments": ["lost-ack"], "started_at": "2026-01-01T00:00:00Z", "ended_at": "2026-01-01T00:00:01Z",
         "runs": [], "cells": cells}
    )  # fmt: skip
    (default,) = parse(sweep_heatmap(doc)).iter(f"{SVG}a")
    assert default.get("href") == "r1/incidents/i.json"
    inline = sweep_heatmap(
        doc, href=lambda c: f"/bundles/x~{(c.incident or '').split('/')[0]}", declaration=False
    )
    (link,) = ET.fromstring(inline).iter(f"{SVG}a")
    assert link.get("href") == "/bundles/x~r1"
    assert "acklab sweep s: pass (2 trials per cell)" in texts(ET.fromstring(inline))
