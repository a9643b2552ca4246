"""`acklab evidence pull --last N`: a branch's last N finished pipelines, each verified and stored
all or nothing, against the GitLab API double (python-gitlab over real HTTP); then the console's
history over what was pulled."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from acklab.console.history import history
from acklab.console.index import EvidenceIndex
from tests.console.handlers import write_run
from tests.console.samples import BASE_TIME
from tests.evidence.test_pull import zip_tree

LOST_ACK = ("pass", "pass", "fail", "fail", "fail")  # per evidence pipeline, oldest first


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, gitlab_double: Any) -> pytest.MonkeyPatch:
    for name in ("GITLAB_URL", "CI_SERVER_URL", "GITLAB_TOKEN", "CI_JOB_TOKEN", "CI_DEFAULT_BRANCH"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GITLAB_URL", gitlab_double.url)
    monkeypatch.setenv("GITLAB_TOKEN", gitlab_double.private_token)
    return monkeypatch


@pytest.fixture
def project(tmp_path: Path, gitlab_double: Any) -> dict[str, Any]:
    """main: five pipelines with an evidence job (the third tampered), one without evidence,
    one still running; a feature branch's pipeline; and the pipeline now running the pull."""
    state = gitlab_double.state
    project = state.add_project("acme/shop", id=42)
    ids: dict[str, Any] = {"evidence": []}
    for n, verdict in enumerate(LOST_ACK):
        pipeline = state.add_pipeline(project, status="failed" if verdict == "fail" else "success")
        staged = tmp_path / f"job-{pipeline.id}"
        bundle = write_run(
            staged / f"live-{n}",
            run_id=f"live-{n}",
            target="fixture:live",
            verdicts={"lost-ack": verdict},
            created=BASE_TIME + timedelta(days=n),
            handler="v1" if n < 2 else "v2",
            seed=pipeline.id,
            pipeline=pipeline.id,
        )
        if n == 2:  # edited after the manifest was written
            (bundle / "run.json").write_text((bundle / "run.json").read_text().replace('"fail"', '"pass"'))
        state.add_job(pipeline, "lint")
        state.add_job(pipeline, "evidence", artifacts=zip_tree(staged))
        ids["evidence"].append(pipeline.id)
    empty = state.add_pipeline(project)
    state.add_job(empty, "lint")
    ids["empty"] = empty.id
    ids["running"] = state.add_pipeline(project, status="running").id
    ids["feature"] = state.add_pipeline(project, ref="feature").id
    ids["current"] = state.add_pipeline(project, status="running").id
    return ids


def pull(acklab: Any, out: Path, *args: Any) -> tuple[int, list[dict[str, Any]], str]:
    code, stdout, stderr = acklab(
        "evidence", "pull", "--project", "acme/shop", "--ref", "main", "--out", out, "--json", *args
    )
    return code, json.loads(stdout) if stdout.strip() else [], stderr


def test_the_last_pipelines_are_pulled_each_verified_on_its_own(
    tmp_path, gitlab_double, project, env, acklab
):
    out = tmp_path / "history"
    evidence = project["evidence"]
    code, rows, stderr = pull(acklab, out, "--last", 6, "--exclude", project["current"])
    assert code == 7, stderr  # the tampered pipeline: named, nothing of it stored
    assert [(r["pipeline"], r["status"]) for r in rows] == [
        (project["empty"], "no evidence"),
        (evidence[4], "pulled"),
        (evidence[3], "pulled"),
        (evidence[2], "refused"),
        (evidence[1], "pulled"),
        (evidence[0], "pulled"),
    ]
    assert f"pipeline(s) {evidence[2]} failed verification" in stderr
    assert "changed: run.json" in rows[3]["detail"]
    # the pipelines that verified, and the local journal that records each bundle pulled
    assert sorted(p.name for p in out.iterdir()) == sorted(
        ["journal.sqlite", *(f"pipeline-{p}" for p in (0, 1, 3, 4) for p in [evidence[p]])]
    )
    listing = [r for r in gitlab_double.state.requests if r.path.endswith("/pipelines")]
    assert listing, [r.path for r in gitlab_double.state.requests][:5]
    assert all("ref=main" in r.query and "scope=finished" in r.query for r in listing)
    assert gitlab_double.private_token not in stderr

    # A rerun fetches only what is new: the stored pipelines are kept as they are.
    code, rows, _ = pull(acklab, out, "--last", 6, "--exclude", project["current"])
    assert code == 7
    assert [r["status"] for r in rows] == [
        "no evidence",
        *["already pulled"] * 2,
        "refused",
        *["already pulled"] * 2,
    ]

    # The console's history over what was pulled: the flip and the flaky row.
    [row] = history(EvidenceIndex(out).snapshot()).rows
    assert [(p, c.verdict) for p, c in row.cells.items()] == [
        (str(evidence[0]), "pass"),
        (str(evidence[1]), "pass"),
        (str(evidence[3]), "fail"),
        (str(evidence[4]), "fail"),
    ]
    assert (row.first_failed, row.flaky) == (str(evidence[3]), True)


def test_last_counts_finished_pipelines_of_the_ref_only(tmp_path, gitlab_double, project, env, acklab):
    code, rows, stderr = pull(acklab, tmp_path / "h", "--last", 2, "--job", "evidence")
    assert code == 0, stderr
    assert [(r["pipeline"], r["status"]) for r in rows] == [
        (project["empty"], "no evidence"),  # no job named evidence: noted, not an error
        (project["evidence"][4], "pulled"),
    ]


@pytest.mark.parametrize(
    "args",
    [("--pipeline", 1, "--last", 2), (), ("--pipeline", 1, "--exclude", 3)],
    ids=["both", "neither", "exclude-without-last"],
)
def test_pipeline_or_last_is_a_usage_question(tmp_path, env, acklab, args):
    code, _, stderr = acklab("evidence", "pull", "--project", "p", "--out", tmp_path / "o", *args)
    assert code == 2, stderr
    assert not (tmp_path / "o").exists()


def test_last_needs_a_ref(tmp_path, env, acklab):
    code, _, stderr = acklab("evidence", "pull", "--project", "p", "--last", 3, "--out", tmp_path / "o")
    assert code == 2
    assert "--ref" in stderr
