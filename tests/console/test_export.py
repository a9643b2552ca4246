"""The static Pages snapshot: relative links only, a dated banner, raw copies, writes only in --out."""

from __future__ import annotations

import json
import re
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from acklab.cli import main
from acklab.console.errors import OutputRefused
from acklab.console.export import build_snapshot
from acklab.evidence.exitcodes import ExitCode
from tests.console.samples import make_run_bundle

CI = {"CI_PIPELINE_ID": "777", "CI_COMMIT_SHA": "abcdef1234567890" * 2}
LINK = re.compile(r'(?:href|src)="([^"]*)"')


@pytest.fixture(scope="module")
def public(sample_evidence: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("pages") / "public"
    build_snapshot(sample_evidence, out, env=CI)
    return out


def pages_of(public: Path) -> list[Path]:
    return sorted(public.rglob("*.html"))


def test_every_view_is_rendered(public):
    rels = {p.relative_to(public).as_posix() for p in pages_of(public)}
    assert "index.html" in rels
    assert "compare/index.html" in rels
    assert "pipelines/index.html" in rels
    assert "bundles/flow-0001/trail.html" in rels
    assert "bundles/run-0001-unsafe/incidents/run-0001-unsafe-fixture-unsafe-lost-ack.html" in rels
    assert "bundles/run-tampered/pipeline.html" in rels
    # one page per event, and the pair's entry page opened where the handlers first differ
    assert sum(r.startswith("compare/lost-ack-s7-") for r in rels) == 4
    assert sum(r.startswith("compare/lost-ack-s7-") and r.endswith("/index.html") for r in rels) == 1
    assert json.loads((public / "snapshot.json").read_text())["pipeline"] == "777"


def test_every_internal_link_is_relative_and_resolves_inside_the_snapshot(public):
    for page in pages_of(public):
        for url in LINK.findall(page.read_text()):
            if url.startswith(("https://", "http://")):
                continue  # a pipeline or merge request on GitLab
            assert not url.startswith(("/", "//")), (page, url)
            assert ":" not in url.split("/")[0], (page, url)
            path = urlsplit(url).path
            if not path:
                continue  # an anchor on the same page
            target = (page.parent / unquote(path)).resolve()
            assert target.is_relative_to(public.resolve()), (page, url)
            assert target.is_file(), (page, url)


def test_every_page_says_it_is_a_dated_historical_snapshot(public):
    for page in pages_of(public):
        html = page.read_text()
        assert "Historical snapshot." in html, page
        assert "pipeline 777" in html, page
        assert "abcdef123456" in html, page
        assert re.search(r"Generated \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", html), page
        assert "Content-Security-Policy" in html
        assert "<script>" not in html


def test_raw_documents_and_reports_are_copied_as_inert_data(public, sample_evidence):
    for rel, published in (
        (
            "run-0001-unsafe/incidents/run-0001-unsafe-fixture-unsafe-lost-ack.json",
            "run-0001-unsafe/incidents/run-0001-unsafe-fixture-unsafe-lost-ack.json",
        ),
        ("run-0001-unsafe/manifest.json", "run-0001-unsafe/manifest.json"),
        ("run-0001-unsafe/reports/junit.xml", "run-0001-unsafe/reports/junit.xml.txt"),
        ("flow-0001/trail.json", "flow-0001/trail.json"),
    ):
        assert (public / "raw" / published).read_bytes() == (sample_evidence / rel).read_bytes()
    # Nothing under raw/ has an extension a static host would serve as active content.
    suffixes = {p.suffix for p in (public / "raw").rglob("*") if p.is_file()}
    assert suffixes <= {".txt", ".json"}, suffixes


def test_static_comparison_uses_anchors_for_steps(public):
    page = next((public / "compare").glob("lost-ack-s7-*/event-1.html"))
    html = page.read_text()
    assert 'href="event-1.html#step-2"' in html
    assert 'id="step-2"' in html
    assert 'data-mode="static"' in html


def test_banner_falls_back_to_the_newest_manifest(sample_evidence, tmp_path):
    build_snapshot(sample_evidence, tmp_path / "public", env={})
    html = (tmp_path / "public" / "index.html").read_text()
    assert "pipeline 4200" in html  # the flow bundle is the newest
    assert "0123abcd0123" in html


def test_refuses_out_that_is_contains_or_lies_inside_the_evidence(evidence):
    for out in (evidence, evidence.parent, evidence / "public", evidence / "run-0000-live" / "x"):
        with pytest.raises(OutputRefused) as info:
            build_snapshot(evidence, out, env={})
        assert info.value.exit_code == ExitCode.REFUSED


def test_refuses_to_replace_a_directory_it_did_not_write(sample_evidence, tmp_path):
    out = tmp_path / "docs"
    out.mkdir()
    (out / "precious.txt").write_text("keep me")
    with pytest.raises(OutputRefused, match="not empty"):
        build_snapshot(sample_evidence, out, env={})
    assert (out / "precious.txt").read_text() == "keep me"


def test_rebuild_replaces_an_earlier_snapshot_and_writes_nowhere_else(sample_evidence, tmp_path):
    out = tmp_path / "site" / "public"
    build_snapshot(sample_evidence, out, env={})
    (out / "stale.html").write_text("old")
    before = sorted(
        p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if not p.is_relative_to(out)
    )
    evidence_before = sorted((p, p.stat().st_mtime_ns) for p in sample_evidence.rglob("*"))
    build_snapshot(sample_evidence, out, env={})
    assert not (out / "stale.html").exists()
    after = sorted(
        p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if not p.is_relative_to(out)
    )
    assert after == before
    assert sorted((p, p.stat().st_mtime_ns) for p in sample_evidence.rglob("*")) == evidence_before


def test_cli_builds_and_maps_refusal_to_exit_5(sample_evidence, tmp_path, capsys):
    with pytest.raises(SystemExit) as done:
        main(["pages", "--evidence", str(sample_evidence), "--out", str(tmp_path / "public")])
    assert done.value.code == 0
    assert "pages and" in capsys.readouterr().err
    with pytest.raises(SystemExit) as done:
        main(["pages", "--evidence", str(sample_evidence), "--out", str(sample_evidence)])
    assert done.value.code == ExitCode.REFUSED
    with pytest.raises(SystemExit) as done:
        main(["pages", "--evidence", str(tmp_path / "missing"), "--out", str(tmp_path / "p2")])
    assert done.value.code == ExitCode.INVALID_INPUT


def test_paginated_lists_are_rendered_page_by_page(tmp_path):
    evidence = tmp_path / "ev"
    for seed in range(26):
        for target in ("fixture:unsafe", "fixture:live"):
            make_run_bundle(
                evidence,
                run_id=f"s{seed:02d}-{target[8:]}",
                target=target,
                seed=seed,
                experiments=("replay",),
                trials=1,
            )
    public = tmp_path / "public"
    build_snapshot(evidence, public, env={})
    for rel in ("overview/page-2.html", "pipelines/page-2.html", "compare/page-2.html"):
        assert (public / rel).is_file(), rel
    assert 'href="page-2.html"' in (public / "compare" / "index.html").read_text()
    test_every_internal_link_is_relative_and_resolves_inside_the_snapshot(public)
