"""What each view shows, rendered server-side (no JavaScript involved)."""

from __future__ import annotations

import re
from datetime import timedelta
from html import unescape

from acklab.console.render import BOUNDARY
from acklab.evidence.bundle import BundleWriter
from tests.console.samples import BASE_TIME, XSS_ATTR, XSS_SCRIPT, make_incident, make_run_bundle

LOST_ACK_UNSAFE = "/bundles/run-0001-unsafe/incidents/run-0001-unsafe-fixture-unsafe-lost-ack"
COMPARE = (
    "/compare?left=run-0001-unsafe:run-0001-unsafe-fixture-unsafe-lost-ack"
    "&right=run-0001-live:run-0001-live-fixture-live-lost-ack"
)


def text_of(html: str) -> str:
    return re.sub(r"\s+", " ", unescape(re.sub(r"<[^>]+>", " ", html)))


def test_overview_shows_the_heatmap_the_latency_charts_and_the_bundles(client):
    html = client.get("/").text
    assert len(re.findall(r'<a href="[^"]*" class="cell ', html)) == 10  # 2 targets x 5 experiments
    assert "FAIL" in html
    assert "PASS" in html
    assert "0% pass" in html
    assert "100% pass" in html
    assert 'class="chart latency"' in html
    for key in ("run-0001-unsafe", "run-0001-live", "flow-0001", "run-tampered", "run-incomplete"):
        assert f'href="/bundles/{key}"' in html
    assert "integrity warning" in html
    assert "incomplete" in html
    assert BOUNDARY in text_of(html)


def test_heatmap_cells_link_to_the_newest_incident(client):
    html = client.get("/").text
    assert f'href="{LOST_ACK_UNSAFE}"' in html
    assert "/bundles/run-0000-unsafe/incidents/" not in html.split("Latency under fault")[0]


def test_incident_shows_timeline_confirmation_verdict_boundary_and_raw_link(client):
    html = client.get(LOST_ACK_UNSAFE).text
    text = text_of(html)
    assert "lost-ack against fixture:unsafe" in text
    assert "FAIL" in text
    for header in (
        "seq",
        "attempt",
        "kind",
        "fault",
        "handler",
        "sender saw",
        "latency",
        "effects before → after",
    ):
        assert header in text
    assert "commit confirmed (1 effect) before the sender got a synthetic 504" in text
    assert "the lab confirmed the handler's commit" in text
    assert "1 → 2" in text
    assert "over limit" in text
    # the incident's own boundary statement, once: the footer's general sentence gives way to it
    assert text.count("it does not prove exactly-once delivery across systems") == 1
    assert BOUNDARY not in text
    # the why (the violations) comes before the target and experiment facts
    assert text.index("Violations") < text.index("Target") < text.index("Delivery timeline")
    assert 'href="/raw/run-0001-unsafe/incidents/run-0001-unsafe-fixture-unsafe-lost-ack.json"' in html
    assert "Compare fixture:unsafe vs fixture:live" in text


def test_comparison_keeps_event_and_step_in_the_url(client):
    html = client.get(COMPARE + "&event=evt_7_lost-ack_1&step=2").text
    assert re.search(r'<a href="[^"]*event=evt_7_lost-ack_1"[^>]*aria-current="true"', html)
    assert 'class="step-panel current" id="step-2"' in html
    assert 'class="step-panel" id="step-1"' in html
    assert 'data-step="2" class="current' in html
    text = text_of(html)
    assert "delivery 2 of 2" in text
    assert "VIOLATION: more than one effect" in text
    assert "step=1" in html  # the "previous" link, usable without JavaScript


def test_comparison_defaults_and_clamps(client):
    html = client.get(COMPARE + "&step=99").text
    assert 'class="step-panel current" id="step-2"' in html
    assert "evt_7_lost-ack_0" in html
    html = client.get(COMPARE + "&event=unknown").text
    assert 'aria-current="true"><code>evt_7_lost-ack_0' in html


def test_compare_index_lists_pairs_with_the_unsafe_target_on_the_left(client):
    html = client.get("/compare").text
    assert html.count('class="button"') == 5
    assert "left=run-0001-unsafe:run-0001-unsafe-fixture-unsafe-lost-ack" in html


def test_trail_shows_checkpoints_decisions_diff_and_before_after(client):
    html = client.get("/bundles/flow-0001/trail").text
    text = text_of(html)
    for name in ("reproduce", "propose", "approve", "apply", "verify", "strike-again", "publish"):
        assert name in text
    assert "delegated by" in text
    assert "release-bot" in text
    assert "alice" in text
    assert 'class="d-add"' in html
    assert 'class="d-del"' in html
    assert 'class="chart durations"' in html
    assert "PUBLISHED" in text
    # verify's checks, with their logs from the flow bundle
    assert "python -m pytest -q tests/app" in text
    assert 'href="/raw/flow-0001/checks/pytest.log"' in html
    assert 'href="/raw/flow-0001/checks/ruff.log"' not in html  # not in the bundle: no dead link
    # before/after: aimed and strike-again experiments, linked to the incidents behind them
    assert "Before and after the patch" in text
    assert "HELD" in text
    assert 'href="/bundles/run-0000-unsafe/incidents/run-0000-unsafe-fixture-unsafe-replay"' in html
    assert 'href="/bundles/run-0000-live/incidents/run-0000-live-fixture-live-replay"' in html
    assert 'href="/bundles/run-0000-unsafe/incidents/run-0000-unsafe-fixture-unsafe-lost-ack"' in html


def test_trail_tolerates_a_document_of_unknown_shape(client_for, tmp_path):
    bundle = tmp_path / "ev" / "flow-odd"
    bundle.mkdir(parents=True)
    (bundle / "trail.json").write_text(
        '{"flow": "x", "checkpoints": [{"name": "verify", "status": "ok", "decision": "yes", '
        '"outputs": {"before": 1, "after": 2}}, "junk"], "proposals": "none", "extra_field": {"a": [1, 2]}}'
    )
    html = client_for(tmp_path / "ev").get("/bundles/flow-odd/trail").text
    assert "extra_field" in html
    assert "does not validate" in html
    assert "incomplete" in html


def test_pipeline_evidence_counts_reports_and_offers_downloads(client):
    html = client.get("/bundles/run-0001-unsafe/pipeline").text
    text = text_of(html)
    assert "#4101" in text
    assert "acklab:experiments" in text
    assert "5 tests" in text
    assert "5 failures" in text
    assert "2 findings" in text  # code quality of the unsafe run
    assert "1 finding" in text  # SAST
    for rel in (
        "reports/junit.xml",
        "reports/codequality.json",
        "reports/gl-sast-report.json",
        "manifest.json",
    ):
        assert f'href="/raw/run-0001-unsafe/{rel}"' in html
    assert "every file matches the sha256" in text


def test_tampered_bundle_is_shown_under_a_warning(client):
    for path in ("/bundles/run-tampered", "/bundles/run-tampered/pipeline"):
        html = client.get(path).text
        assert "Integrity warning" in html
        assert "changed: reports/junit.xml" in html
    html = client.get("/bundles/run-tampered/incidents/run-tampered-fixture-live-lost-ack").text
    assert "Integrity warning" in html
    assert "PASS" in html


def test_bundle_without_manifest_is_incomplete(client):
    html = client.get("/bundles/run-incomplete").text
    assert "Incomplete bundle" in html
    assert "interrupted" in html


def test_pipelines_groups_jobs_by_pipeline(client):
    text = text_of(client.get("/pipelines").text)
    assert "Pipeline #4100" in text
    assert "Pipeline #4101" in text
    assert "Pipeline #4200" in text


def test_overview_is_paginated(client_for, tmp_path):
    evidence = tmp_path / "many"
    for n in range(30):
        make_run_bundle(
            evidence,
            run_id=f"r{n:03d}",
            target="fixture:live",
            experiments=("replay",),
            trials=1,
            created=BASE_TIME + timedelta(minutes=n),
        )
    client = client_for(evidence)
    first = client.get("/").text
    assert "page 1 of 2" in first
    assert 'href="/bundles/r029"' in first
    assert 'href="/bundles/r000"' not in first
    second = client.get("/?page=2").text
    assert 'href="/bundles/r000"' in second
    assert 'href="/bundles/r029"' not in second


def test_hostile_incident_content_is_escaped_everywhere(client_for, hostile_evidence):
    client = client_for(hostile_evidence)
    incident = "/bundles/run-0000-unsafe/incidents/run-0000-unsafe-fixture-unsafe-lost-ack"
    pages = [
        "/",
        "/compare",
        "/bundles/run-0000-unsafe",
        incident,
        "/bundles/flow-0001/trail",
        "/compare?left=run-0000-unsafe:run-0000-unsafe-fixture-unsafe-lost-ack"
        "&right=run-0000-live:run-0000-live-fixture-live-lost-ack",
    ]
    for path in pages:
        html = client.get(path).text
        assert XSS_SCRIPT not in html, path
        assert XSS_ATTR not in html, path
        assert "<img" not in html, path
    html = client.get(incident).text
    assert "&lt;script&gt;window.__xss=1&lt;/script&gt;" in html
    assert "&#34;&gt;&lt;img src=x onerror=&#34;window.__xss=1&#34;&gt;" in html


def test_compare_index_and_a_large_bundle_are_paginated(client_for, tmp_path):
    evidence = tmp_path / "pairs"
    for seed in range(26):
        for target in ("fixture:unsafe", "fixture:live"):
            make_run_bundle(
                evidence,
                run_id=f"s{seed:02d}-{target[8:]}",
                target=target,
                seed=seed,
                experiments=("replay",),
                trials=1,
                created=BASE_TIME + timedelta(minutes=seed),
            )
    writer = BundleWriter(evidence / "merged", kind="merged")
    for n in range(60):
        incident = make_incident(
            run_id="m",
            target="fixture:live",
            experiment="replay",
            seed=100 + n,
            trials=1,
            created=BASE_TIME,
            hostile=False,
        )
        incident["incident_id"] = f"m-{n:03d}"
        writer.write_json(f"incidents/m-{n:03d}.json", incident, kind="incident")
    writer.finalize(env={})
    client = client_for(evidence)
    first = client.get("/compare").text
    assert "page 1 of 2" in first
    assert "left=s25-unsafe:" in first  # newest pair first
    assert "left=s00-unsafe:" in client.get("/compare?page=2").text
    merged = client.get("/bundles/merged").text
    assert "page 1 of 2" in merged
    assert "m-049" in merged
    assert "m-050" not in merged
    assert "m-059" in client.get("/bundles/merged?page=2").text


def test_a_run_entry_without_incident_is_shown_as_the_lab_error_it_is(client_for, tmp_path):
    writer = BundleWriter(tmp_path / "ev" / "r-err", kind="run")
    writer.write_json(
        "run.json",
        {
            "schema": "acklab/run/v1", "run_id": "r-err", "verdict": "error", "status": "complete",
            "target": "fixture:live", "seed": 3, "started_at": "2026-01-05T09:00:00Z", "ended_at": "2026-01-05T09:01:00Z",
            "experiments": [{"name": "db-reset", "verdict": "error", "trials": 0, "violations": [],
                             "incident": None, "error": "database unreachable"}],
        },
        kind="run",
    )  # fmt: skip
    writer.finalize(env={})
    client = client_for(tmp_path / "ev")
    overview = client.get("/").text
    assert "ERROR" in overview
    assert 'href="/bundles/r-err"' in overview
    assert "no incident: database unreachable" in text_of(client.get("/bundles/r-err").text)
