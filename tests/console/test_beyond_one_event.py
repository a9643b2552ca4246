"""The console over real runs beyond one event: the incident page shows each object's deliveries in
the order they arrived and the state read after each; the Compare page steps through an object."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from acklab.console.index import EvidenceIndex
from tests.console.conftest import LiveServer

pytestmark = pytest.mark.slow
ACKLAB = Path(sys.executable).parent / "acklab"
EXPERIMENTS = ("out-of-order", "race-with-request")


@pytest.fixture(scope="module")
def real_evidence(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("beyond") / "out"
    for target, expected in (("fixture:unsafe", 1), ("fixture:live", 0)):
        argv = [str(ACKLAB), "run", "--target", target, "--trials", "1", "--seed", "27", "--out", str(out)]
        for name in EXPERIMENTS:
            argv += ["--experiment", name]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
        assert done.returncode == expected, done.stderr
    return out


def incident_of(evidence: Path, target: str, experiment: str) -> tuple[str, str]:
    bundle = next(b for b in EvidenceIndex(evidence).snapshot().bundles if b.run and b.run.target == target)
    incident = next(i for i in bundle.incidents if i.experiment == experiment)
    return bundle.key, str(incident.incident_id)


def test_the_incident_page_shows_each_objects_arrival_order_and_state_after_each_delivery(
    client_for, real_evidence
):
    client = client_for(real_evidence)
    key, incident = incident_of(real_evidence, "fixture:unsafe", "out-of-order")
    html = client.get(f"/bundles/{key}/incidents/{incident}").text
    assert "each object's deliveries in the order they arrived" in html
    for variant in ("reversed", "newest-first", "stale-redelivery", "same-second"):
        assert f"<strong>{variant}</strong>" in html
    # reversed: order.refunded (3 of 3) arrived first, then paid, then created — read after each.
    reversed_table = html.split("<strong>reversed</strong>")[1].split("</table>")[0]
    arrived = re.findall(r"<td>(order\.\w+) <span class=\"muted\">\((\d) of 3\)", reversed_table)
    assert arrived == [("order.refunded", "3"), ("order.paid", "2"), ("order.created", "1")]
    assert re.findall(r"<td><code>(\w+)</code></td>", reversed_table) == ["refunded", "paid", "created"]
    assert 'badge badge-fail">state-never-regresses' in reversed_table
    assert "newest event's state <code>refunded</code>" in html
    live_key, live_incident = incident_of(real_evidence, "fixture:live", "out-of-order")
    live = client.get(f"/bundles/{live_key}/incidents/{live_incident}").text
    live_reversed = live.split("<strong>reversed</strong>")[1].split("</table>")[0]
    assert re.findall(r"<td><code>(\w+)</code></td>", live_reversed) == ["refunded"] * 3


def test_the_compare_page_steps_through_an_object(client_for, real_evidence):
    client = client_for(real_evidence)
    left, right = (incident_of(real_evidence, t, "out-of-order") for t in ("fixture:unsafe", "fixture:live"))
    base = f"/compare?left={left[0]}:{left[1]}&right={right[0]}:{right[1]}"
    first = client.get(base).text
    # The objects are what is stepped through: the same seed played the same objects on both.
    objects = re.findall(r"event=(ord_[0-9a-f]+)", first)
    assert objects
    page = client.get(f"{base}&event={objects[0]}&step=2").text
    assert 'class="step-panel current" id="step-2"' in page
    assert "<dt>state after</dt><dd><code>paid</code>" in page  # unsafe: back to paid
    assert "<dt>state after</dt><dd><code>refunded</code>" in page  # live: still refunded
    assert "the handlers differ here" in page


def test_the_object_views_render_cleanly_in_a_browser(browser: Any, real_evidence: Path) -> None:
    from tests.console.test_browser import current_step, watched

    left, right = (
        incident_of(real_evidence, t, "race-with-request") for t in ("fixture:unsafe", "fixture:live")
    )
    with LiveServer(real_evidence) as live, watched(browser) as w:
        w.open(f"{live.url}/bundles/{left[0]}/incidents/{left[1]}")
        tables = w.page.locator("table.arrival")
        assert tables.count() == 5  # three pairs together, two near misses
        assert "the app's own request" in tables.first.inner_text()
        assert w.page.locator("div.object-fail").count() == 5
        w.shot("live-incident-objects")
        w.open(f"{live.url}/compare?left={left[0]}:{left[1]}&right={right[0]}:{right[1]}")
        # opened at the object's first delivery where the handlers differ: the second
        assert current_step(w.page) == "2"
        assert "the handlers differ here" in w.page.inner_text(".step-panel.current")
        w.page.keyboard.press("k")
        assert current_step(w.page) == "1"
        w.shot("live-compare-object")
        w.assert_clean()
