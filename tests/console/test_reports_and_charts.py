"""Report counting and the server-side SVG charts."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

from acklab.console.overview import Heatmap, HeatRow, LatencyRow
from acklab.console.reports import read_report
from acklab.console.scan import IncidentSummary
from acklab.console.svg import delivery_latency_svg, durations_svg, heatmap_svg, latency_svg, ms
from acklab.console.timeline import trial_views
from acklab.evidence.documents.incident import Incident
from acklab.evidence.documents.latency import Latency
from tests.console.samples import BASE_TIME, XSS_ATTR, XSS_SCRIPT, make_incident

JUNIT = b"""<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="fixture:unsafe">
<testcase name="lost-ack"><failure message="x">v</failure></testcase>
<testcase name="replay"/><testcase name="db-reset"><error/></testcase><testcase name="s"><skipped/></testcase>
</testsuite><testsuite name="fixture:live"><testcase name="lost-ack"/></testsuite></testsuites>
"""


def test_junit_counts(tmp_path):
    (tmp_path / "junit.xml").write_bytes(JUNIT)
    report = read_report(tmp_path, "junit.xml")
    assert (report.kind, report.tests, report.failures, report.errors, report.skipped) == (
        "JUnit",
        5,
        1,
        1,
        1,
    )
    assert [s.name for s in report.suites] == ["fixture:unsafe", "fixture:live"]


def test_junit_with_a_dtd_is_refused_not_parsed(tmp_path):
    bomb = b'<?xml version="1.0"?><!DOCTYPE x [<!ENTITY a "aaaa"><!ENTITY b "&a;&a;&a;">]><testsuite>&b;</testsuite>'
    (tmp_path / "junit.xml").write_bytes(bomb)
    report = read_report(tmp_path, "junit.xml")
    assert report.problem == "refused: the XML declares a DTD or entities"
    assert report.tests == 0


def test_broken_reports_are_problems(tmp_path):
    (tmp_path / "a.xml").write_bytes(b"<testsuite>")
    (tmp_path / "b.json").write_bytes(b"{oops")
    assert "not well-formed" in (read_report(tmp_path, "a.xml").problem or "")
    assert "not valid JSON" in (read_report(tmp_path, "b.json").problem or "")
    assert "missing" in (read_report(tmp_path, "c.json").problem or "")


def test_code_quality_and_sast_findings_by_severity(tmp_path):
    (tmp_path / "cq.json").write_text(
        json.dumps([{"severity": "major"}, {"severity": "minor"}, {"severity": "major"}])
    )
    (tmp_path / "sast.json").write_text(
        json.dumps({"scan": {"type": "sast"}, "vulnerabilities": [{"severity": "High"}, {"severity": "Low"}]})
    )
    (tmp_path / "deps.json").write_text(
        json.dumps({"scan": {"type": "dependency_scanning"}, "vulnerabilities": []})
    )
    cq = read_report(tmp_path, "cq.json")
    assert (cq.kind, cq.findings, cq.severities) == ("code quality", 3, {"major": 2, "minor": 1})
    sast = read_report(tmp_path, "sast.json")
    assert (sast.kind, sast.findings, sast.severities) == ("SAST", 2, {"high": 1, "low": 1})
    assert read_report(tmp_path, "deps.json").kind == "dependency scanning"


def summary(target: str, verdict: str) -> IncidentSummary:
    return IncidentSummary(
        bundle="b",
        incident_id="i",
        path="incidents/i.json",
        run_id="r",
        created_at="",
        sort_time=0.0,
        target=target,
        experiment="lost-ack" + XSS_ATTR,
        seed=7,
        verdict=verdict,
        trials=4,
        passed=1,
        failed=3,
        errors=0,
        violations=3,
        faulted=Latency(count=3, p50=30.0, p95=40.0, max=2000.0),
        clean=Latency(count=4, p50=2.0, p95=3.0, max=5.0),
    )


def parse(svg: str) -> ET.Element:
    return ET.fromstring(svg)  # well-formed, or this raises


def test_charts_escape_recorded_names_and_use_no_style_attributes():
    hostile = summary("fixture:" + XSS_SCRIPT, "fail")
    row = HeatRow(hostile.target, "postgresql" + XSS_ATTR, f"{hostile.target} · postgresql{XSS_ATTR}")
    grid = Heatmap([row], [hostile.experiment + XSS_ATTR], {(row, hostile.experiment + XSS_ATTR): hostile})
    trials = trial_views(
        Incident.read(
            make_incident(
                run_id="r",
                target="fixture:unsafe",
                experiment="lost-ack",
                seed=7,
                trials=2,
                created=BASE_TIME,
                hostile=True,
            )
        )
    )
    charts = [
        str(heatmap_svg(grid, lambda i: 'x"><script>', {"b"})),
        str(latency_svg(XSS_SCRIPT, [LatencyRow(hostile.target, hostile, hostile.faulted, hostile.clean)])),
        str(delivery_latency_svg(trials)),
        str(durations_svg([(XSS_SCRIPT, 12.5, "ok"), ("verify", 1500, "failed")])),
    ]
    frame = parse(charts[0])  # the heatmap: its row labels beside a region that scrolls the grid
    assert frame.tag == "div"
    assert all("style" not in el.attrib for el in frame.iter())
    svgs = [str(ET.tostring(el, encoding="unicode")) for el in frame.iter() if el.tag.endswith("svg")]
    assert len(svgs) == 2
    for chart in charts + svgs:
        assert "<script" not in chart
        assert XSS_ATTR not in chart
    for chart in charts[1:] + svgs:
        root = parse(chart)
        assert all("style" not in el.attrib for el in root.iter())
        assert root.get("role") == "img"
    heat = charts[0]
    assert "FAIL ⚠" in heat
    assert "25% pass" in heat
    assert 'href="x&quot;&gt;&lt;script&gt;"' in heat


def test_latency_labels():
    assert [ms(v) for v in (0.4, 2.179, 12, 999, 2400)] == ["0.4 ms", "2.2 ms", "12 ms", "999 ms", "2.4 s"]
