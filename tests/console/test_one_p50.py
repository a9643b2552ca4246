"""One p50 everywhere: 1, 2, ... 10 ms read by every reader of acklab give one p50 (5 ms, nearest rank).

The harness's incident summary, the merge of shards, the console's overview and latency
chart, and the repair flow's before/after all take their figures from
`acklab.evidence.documents.latency`.
"""

from __future__ import annotations

from html import unescape

from acklab.console.index import EvidenceIndex
from acklab.evidence.bundle import BundleWriter
from acklab.evidence.documents.incident import Incident, IncidentExperiment, IncidentTarget
from acklab.evidence.documents.latency import Latency, percentile
from acklab.evidence.documents.run import RunDocument, RunExperiment
from acklab.evidence.documents.trial import Trial
from acklab.evidence.incidents import Group, merge_group
from acklab.flows.lab import latency_of
from tests.evidence.factories import BOUNDARY, T0, T1
from tests.evidence.factories import trial as trial_doc

LATENCIES = [float(ms) for ms in range(1, 11)]
P50, P95 = 5.0, 10.0


def trials(run_id: str = "r1") -> list[Trial]:
    """Two trials whose answered deliveries took 1 ... 10 ms (one more, unanswered, counts for nothing)."""
    found = []
    for index, latencies in enumerate((LATENCIES[:5], LATENCIES[5:])):
        doc = trial_doc(run_id, "lost-ack", index)
        first = doc["deliveries"][0]
        doc["deliveries"] = [first | {"seq": n, "latency_ms": ms} for n, ms in enumerate(latencies)]
        doc["deliveries"].append(first | {"seq": 9, "latency_ms": 0.0, "status": None, "sender_status": None})
        found.append(Trial.read(doc))
    return found


def incident(run_id: str, held: list[Trial]) -> Incident:
    return Incident.build(
        run_id=run_id,
        target=IncidentTarget(name="fixture:live", kind="fixture", endpoint="asgi://fixture"),
        experiment=IncidentExperiment(name="lost-ack", description="the lost-ack experiment"),
        seed=7,
        invariants=["at-most-once-effect"],
        trials=held,
        boundary=BOUNDARY,
        created_at=T1,
    )


def write_run(root, run_id: str, found: Incident) -> None:
    writer = BundleWriter(root / run_id)
    rel = f"incidents/{found.incident_id}.json"
    writer.write_document(rel, found)
    run = RunDocument.build(
        run_id=run_id, target="fixture:live", seed=7, status="complete", started_at=T0, ended_at=T1,
        experiments=[RunExperiment.of_incident(found, rel)], acklab_version="0",
    )  # fmt: skip
    writer.write_document("run.json", run)
    writer.finalize(env={})


def test_the_percentile_is_nearest_rank():
    assert percentile(LATENCIES, 50) == P50
    assert percentile(LATENCIES, 95) == P95
    assert percentile([7.0], 95) == 7.0
    assert percentile([float(i) for i in range(1, 101)], 95) == 95.0
    assert Latency.of(LATENCIES) == Latency(count=10, p50=P50, p95=P95, max=10.0)


def test_every_reader_gets_one_p50(tmp_path):
    # the harness: the incident it writes
    built = incident("r1", trials())
    figures = built.summary.latency_ms
    assert figures is not None
    assert (figures.p50, figures.p95, figures.max) == (P50, P95, 10.0)

    # the merge: an experiment split between two shards, its incident built again
    shards = [incident("r1", [t]) for t in trials()]
    group = Group(
        "fixture:live", "lost-ack", incidents=[(f"incidents/s{n}.json", i) for n, i in enumerate(shards)]
    )
    _, _, merged = merge_group(group, run_id="r1", taken=set())
    assert merged is not None
    assert merged.summary.latency_ms == figures

    # the console: the overview's latency of the clean deliveries, and the incident page
    write_run(tmp_path / "ev", "r1", built)
    index = EvidenceIndex(tmp_path / "ev")
    (summary,) = index.snapshot().incidents
    assert summary.clean is not None
    assert (summary.clean.count, summary.clean.p50, summary.clean.p95) == (10, P50, P95)

    # the repair flow: what it weighs before and after a patch
    lab = latency_of(tmp_path / "ev" / "r1" / "incidents" / f"{built.incident_id}.json")
    assert lab is not None
    assert (lab.p50_ms, lab.p95_ms, lab.deliveries) == (P50, P95, 10)


def test_the_console_shows_the_recorded_figures(tmp_path, client_for):
    built = incident("r1", trials())
    write_run(tmp_path / "ev", "r1", built)
    html = unescape(client_for(tmp_path / "ev").get(f"/bundles/r1/incidents/{built.incident_id}").text)
    assert "5 ms · 10 ms · 10 ms" in html
