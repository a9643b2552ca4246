"""The console over bundles written by a real `acklab run` (the harness), not by the samples."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from acklab.console.export import build_snapshot
from acklab.console.index import VERIFIED, EvidenceIndex
from acklab.evidence.bundle import find_bundles

pytestmark = pytest.mark.slow
ACKLAB = Path(sys.executable).parent / "acklab"


@pytest.fixture(scope="module")
def real_evidence(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("real") / "out"
    for target, expected in (("fixture:unsafe", 1), ("fixture:live", 0)):
        done = subprocess.run(
            [str(ACKLAB), "run", "--target", target, "--experiment", "lost-ack",
             "--experiment", "concurrent-duplicates", "--trials", "1", "--seed", "11", "--out", str(out)],
            capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        assert done.returncode == expected, done.stderr
    return out


def test_real_bundles_are_indexed_and_verified(real_evidence):
    index = EvidenceIndex(real_evidence)
    snap = index.snapshot()
    assert {b.path for b in snap.bundles} == set(find_bundles(real_evidence))
    assert all(index.integrity(b).status == VERIFIED for b in snap.bundles)
    assert {(i.target, i.experiment, i.verdict) for i in snap.incidents} == {
        ("fixture:unsafe", "lost-ack", "fail"),
        ("fixture:unsafe", "concurrent-duplicates", "fail"),
        ("fixture:live", "lost-ack", "pass"),
        ("fixture:live", "concurrent-duplicates", "pass"),
    }


def test_real_run_views(client_for, real_evidence):
    client = client_for(real_evidence)
    overview = client.get("/").text
    assert len(re.findall(r'<a href="[^"]*" class="cell ', overview)) == 4
    unsafe = next(
        b
        for b in EvidenceIndex(real_evidence).snapshot().bundles
        if b.run and b.run.target == "fixture:unsafe"
    )
    incident = next(i for i in unsafe.incidents if i.experiment == "lost-ack")
    html = client.get(f"/bundles/{unsafe.key}/incidents/{incident.incident_id}").text
    assert "commit confirmed (1 effect) before the sender got a synthetic 504" in html
    assert "over limit" in html
    assert "in 1/1 trials" in html  # the fault landed, and the console says in how many trials
    assert "does not validate" not in html
    burst = next(i for i in unsafe.incidents if i.experiment == "concurrent-duplicates")
    html = client.get(f"/bundles/{unsafe.key}/incidents/{burst.incident_id}").text
    # The burst's arrival spread: in the figures, and in the trial's fault proof beside its evidence.
    assert re.search(r"arrival spread \(last-byte\)</dt><dd>\s*sender p50 [0-9.]+ ms", html), html
    assert re.search(r"handler p50 [0-9.]+ ms \(max [0-9.]+ ms\)", html)
    assert "Fault proof" in html
    assert re.search(r"try \d: <strong>landed</strong> — \d+ of 16 duplicates were at the handler", html)
    assert "<dt>handler_spread_ms</dt>" in html
    compare = client.get("/compare").text
    links = re.findall(r'href="(/compare\?[^"]+)"', compare)
    assert len(links) == 2
    lost_ack = next(link for link in links if "lost-ack" in link).replace("&amp;", "&")
    page = client.get(lost_ack + "&step=2").text
    assert "VIOLATION: more than one effect" in page
    assert 'class="step-panel current" id="step-2"' in page


def test_real_run_snapshot(real_evidence, tmp_path):
    result = build_snapshot(real_evidence, tmp_path / "public", env={})
    assert result.pages >= 10
    assert (tmp_path / "public" / "compare" / "index.html").is_file()


def test_a_skipped_experiment_is_shown_with_its_reason(client_for, tmp_path, monkeypatch):
    from tests.consumers import scenarios

    for key, value in scenarios.SECRETS.items():
        monkeypatch.setenv(key, value)
    scenario = scenarios.alert_hook(tmp_path)
    with scenario.started():
        result = scenario.run(tmp_path / "out")
    client = client_for(tmp_path / "out")
    html = client.get(f"/bundles/{result.bundle.name}").text
    assert "SKIPPED" in html
    assert "signs nothing" in html
