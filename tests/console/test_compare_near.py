"""Two targets that ran an experiment under different seeds: the console says so and offers the
nearest comparable pair (events by position), never "nothing to compare"."""

from __future__ import annotations

import re
from datetime import timedelta
from html import unescape
from pathlib import Path

import pytest

from acklab.console.compare import near_pairs, pair_table
from acklab.console.export import build_snapshot
from acklab.console.index import EvidenceIndex
from tests.console.samples import BASE_TIME, make_run_bundle


@pytest.fixture(scope="module")
def two_seeds(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The old demo: unsafe with seed 11, live with seed 22 (twice: an older live run too)."""
    out = tmp_path_factory.mktemp("seeds") / "out"
    for run_id, target, seed, hours in (
        ("live-old", "fixture:live", 33, 0),
        ("unsafe", "fixture:unsafe", 11, 5),
        ("live", "fixture:live", 22, 6),
    ):
        make_run_bundle(
            out,
            run_id=run_id,
            target=target,
            seed=seed,
            experiments=("lost-ack",),
            trials=2,
            created=BASE_TIME + timedelta(hours=hours),
        )
    return out


def test_no_exact_pair_but_the_nearest_one(two_seeds):
    snapshot = EvidenceIndex(two_seeds).snapshot()
    assert pair_table(snapshot) == []
    [near] = near_pairs(snapshot)
    assert (near.experiment, near.left.run_id, near.right.run_id) == ("lost-ack", "unsafe", "live")
    assert not near.same_plan
    assert near.seeds == "11 vs 22"


def test_the_index_says_why_and_links_the_nearest_pair(client_for, two_seeds):
    html = unescape(client_for(two_seeds).get("/compare").text)
    assert "Nothing to compare" not in html
    assert "ran the same experiment but never with the same seed" in html
    assert "--compare-with" in html
    [link] = re.findall(r'href="(/compare\?left=[^"]+)">Compare the nearest pair', html)
    assert "left=unsafe:" in link
    assert "right=live:" in link


def test_the_near_pair_steps_through_events_by_position(client_for, two_seeds):
    client = client_for(two_seeds)
    link = re.findall(r'href="(/compare\?left=[^"]+)"', unescape(client.get("/compare").text))[0]
    html = unescape(client.get(link + "&event=evt_22_lost-ack_1&step=2").text)
    assert "Not the same plan." in html
    assert "different seeds (11 vs 22)" in html
    assert "evt_11_lost-ack_0 \u2194 evt_22_lost-ack_0" in html
    # the right side's event named in the URL selects its pair (position 2)
    assert re.search(r'aria-current="true"><code>evt_11_lost-ack_1 \u2194 evt_22_lost-ack_1</code>', html)
    panel = html[html.index('id="step-2"') :]
    assert "no delivery at this step" not in panel[: panel.index("</section>")]  # both sides line up


def test_the_snapshot_prerenders_the_near_pair(two_seeds, tmp_path):
    public = tmp_path / "public"
    build_snapshot(two_seeds, public, env={})
    index = (public / "compare" / "index.html").read_text()
    [href] = re.findall(r'href="([^"]+)">Compare the nearest pair', index)
    page = (public / "compare" / href).resolve()
    assert page.is_file()
    assert "Not the same plan." in page.read_text()


def test_nothing_to_compare_only_when_no_two_targets_share_an_experiment(client_for, tmp_path):
    out = tmp_path / "out"
    make_run_bundle(out, run_id="a", target="fixture:unsafe", experiments=("lost-ack",), trials=1)
    make_run_bundle(out, run_id="b", target="fixture:live", experiments=("replay",), trials=1)
    html = client_for(out).get("/compare").text
    assert "Nothing to compare yet" in html
