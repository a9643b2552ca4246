import xml.etree.ElementTree as ET

from acklab.evidence.documents.incident import Incident
from acklab.evidence.documents.run import RunDocument
from acklab.evidence.reports.junit import experiments_junit
from tests.evidence.factories import T0, T1
from tests.evidence.factories import incident as incident_doc
from tests.evidence.factories import trial as trial_doc

VIOLATION = {
    "invariant": "at-most-once-effect",
    "event_id": "evt_1",
    "observed": 2,
    "expected": "<= 1",
    "detail": "two fulfillments after a lost ack",
}


def incident(target, experiment, verdict, violations=(), error=None) -> Incident:
    trials = [trial_doc("r1", experiment, i, "error" if error and i == 0 else "pass", target) for i in (0, 1)]
    for t in trials:
        t["duration_ms"] = 250.0
        t["error"] = error if t["verdict"] == "error" else None
    doc = incident_doc("r1", experiment, trials, target) | {
        "verdict": verdict,
        "violations": list(violations),
    }
    return Incident.read(doc)


def run_of(target, *experiments) -> RunDocument:
    return RunDocument.read(
        {"schema": "acklab/run/v1", "run_id": "r1", "verdict": "fail", "status": "complete", "target": target,
         "seed": 7, "started_at": T0, "ended_at": T1, "experiments": list(experiments)}
    )  # fmt: skip


def test_one_suite_per_target_one_case_per_experiment_with_failures_and_errors():
    run = run_of(
        "fixture:unsafe",
        {"name": "lost-ack", "verdict": "fail", "trials": 2, "violations": [VIOLATION], "incident": "i"},
        {"name": "replay", "verdict": "pass", "trials": 2, "violations": [], "incident": None},
    )
    incidents = [
        incident("fixture:unsafe", "lost-ack", "fail", [VIOLATION]),
        incident("fixture:live", "lost-ack", "pass"),
        incident("fixture:live", "db-reset", "error", error="database unreachable"),
    ]
    root = ET.fromstring(experiments_junit(run, incidents))
    assert root.tag == "testsuites"
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("4", "1", "1")
    suites = {s.attrib["name"]: s for s in root.iter("testsuite")}
    assert sorted(suites) == ["fixture:live", "fixture:unsafe"]
    unsafe = {c.attrib["name"]: c for c in suites["fixture:unsafe"].iter("testcase")}
    assert sorted(unsafe) == ["lost-ack", "replay"]
    assert all(c.get("classname") == "fixture:unsafe" for c in unsafe.values())
    failure = unsafe["lost-ack"].find("failure")
    assert failure is not None
    assert "1 violation" in failure.attrib["message"]
    for field in ("at-most-once-effect", "evt_1", "2", "<= 1", "two fulfillments"):
        assert field in (failure.text or "")
    assert unsafe["replay"].find("failure") is None
    live = {c.attrib["name"]: c for c in suites["fixture:live"].iter("testcase")}
    assert live["db-reset"].findtext("error") == "database unreachable"
    assert live["lost-ack"].get("time") == "0.500"


def test_empty_run_is_still_valid_xml():
    root = ET.fromstring(experiments_junit(run_of("t"), []))
    assert root.get("tests") == "0"


def test_a_skipped_experiment_is_a_skipped_case_with_its_reason():
    run = run_of(
        "alerts",
        {"name": "replay", "verdict": "skipped", "trials": 0, "violations": [], "incident": None,
         "error": None, "reason": "replay: the scheme signs nothing"},
    )  # fmt: skip
    root = ET.fromstring(experiments_junit(run, []))
    (case,) = root.iter("testcase")
    assert case.find("skipped[@message='replay: the scheme signs nothing']") is not None
    assert (root.get("skipped"), root.get("failures"), root.get("errors")) == ("1", "0", "0")
