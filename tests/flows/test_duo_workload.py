"""The Duo flow file, run as GitLab's Duo Workflow Service runs it (tests/doubles/duo/workload.py):
its commands in a depth-1 workload clone with a flow's environment only, the person's
approval answered here, the agent answered by the OpenAI-compatible double, GitLab the double
(real HTTP, a real bare repository) that takes the flow's OAuth token as a bearer only.

The unsafe fixture's merge request is reproduced, proposed, approved, verified and published
by the flow; a rejected approval ends it with nothing published; a step past its timeout
fails the flow, and nothing is published or left running."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.doubles.duo.workload import FlowRun, Model, Workload, clone_workload, flow_environment
from tests.doubles.gitlab.fixtures import OAUTH_TOKEN
from tests.doubles.openai_api import ScriptedModel, openai_double
from tests.flows.conftest import LIVE, ROOT, UNSAFE, fast_spec, run_git

pytestmark = pytest.mark.slow
FLOW = ROOT / "flows" / "duo" / "repair-flow.yaml"
SUMMARY = "lost-ack made a retried delivery fulfil twice; the patch records a receipt first."


@pytest.fixture
def duo_project(gitlab_mr, tmp_path):
    """MR !1 of shop/orders (the unsafe handler), whose default branch carries a repair spec with
    the quick experiments and checks (flows/repair.yaml, read from the workload's checkout)."""
    spec = fast_spec(tmp_path)
    gitlab_mr.push_commit("flows/repair.yaml", spec.read_text(), "Quick repair checks", branch="main")
    return gitlab_mr


def run_flow_file(gl, tmp_path: Path, flow: Path, decision: str) -> tuple[FlowRun, ScriptedModel, list[str]]:
    """Run `flow` for MR !1 (an Assign reviewer goal: its IID) in a fresh workload."""
    checkout = clone_workload(gl.bare, gl.git_url, "c727f70ba7f", tmp_path / "workload")
    (tmp_path / "home").mkdir()
    env = flow_environment(
        gitlab_url=gl.url,
        oauth_token=OAUTH_TOKEN,
        project_id=42,
        project_path="shop/orders",
        goal="1",
        home=tmp_path / "home",
    )
    # The agent-config's setup puts acklab on the PATH; here it is this test's installation.
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    assert not [name for name in env if name.startswith("CI_")]
    messages: list[str] = []

    def answer(component: str, message: str) -> str:
        messages.append(message)
        return decision

    with openai_double([SUMMARY], api_key="sk-duo-double") as llm:
        model = Model(base_url=llm.base_url, name=llm.model, api_key="sk-duo-double")
        run = Workload(checkout, env, model=model, answer=answer).run(flow)
    return run, llm, messages


def api_requests(gl) -> list:
    return [r for r in gl.state.requests if r.path.startswith("/api/v4/")]


def test_the_flow_repairs_the_merge_request_with_bearer_calls_only(duo_project, tmp_path) -> None:
    gl = duo_project
    old_head = gl.head()
    run, llm, messages = run_flow_file(gl, tmp_path, FLOW, "approve")

    assert [(s.name, s.result) for s in run.steps] == [
        ("propose", "success"),
        ("explain", "answered"),
        ("approve", "approve"),
        ("repair", "success"),
    ], run.context.get("repair", run.context.get("propose"))
    assert run.status == "COMPLETED"

    # The person saw the diff, what it may touch, and the agent's summary.
    [message] = messages
    added = next(line for line in LIVE.splitlines() if line.strip() and line not in UNSAFE)
    assert f"+{added}" in message  # a line the patch adds, as the diff shows it
    assert "scope: may change app/webhooks.py; never tests/, harness/, flows/" in message
    assert SUMMARY in message
    assert "lost-ack" in llm.prompt(0)  # the agent read the lab's output, nothing else

    # Published on top of the MR's head, the scoped file only, never merged.
    new_head = gl.head()
    assert run_git(gl.bare, "rev-parse", f"{new_head}^").strip() == old_head
    assert run_git(gl.bare, "diff", "--name-only", old_head, new_head).split() == ["app/webhooks.py"]
    assert run_git(gl.bare, "show", f"{new_head}:app/webhooks.py") == LIVE
    [note] = gl.mr.notes
    assert "Jane Developer <jane@example.com>" in note["body"]  # who approved in Duo, delegating

    calls = api_requests(gl)
    assert {(r.method, r.path.removeprefix("/api/v4")) for r in calls} >= {
        ("GET", "/projects/42/merge_requests/1"),
        ("POST", "/projects/42/repository/commits"),
        ("POST", "/projects/42/merge_requests/1/notes"),
    }
    assert {r.auth for r in calls} == {"bearer"}, "the flow's OAuth token goes as a bearer, always"
    evidence = b"".join(p.read_bytes() for p in (tmp_path / "workload" / "out").rglob("*") if p.is_file())
    assert OAUTH_TOKEN.encode() not in evidence


def test_a_rejected_approval_ends_the_flow_with_nothing_published(duo_project, tmp_path) -> None:
    gl = duo_project
    head = gl.head()
    run, _, messages = run_flow_file(gl, tmp_path, FLOW, "reject")
    assert [(s.name, s.result) for s in run.steps] == [
        ("propose", "success"),
        ("explain", "answered"),
        ("approve", "reject"),
    ]
    assert run.status == "COMPLETED"
    assert "scope: may change app/webhooks.py" in messages[0]
    assert gl.head() == head
    assert gl.mr.notes == []
    assert {r.method for r in api_requests(gl)} == {"GET"}


def test_a_step_past_its_timeout_fails_the_flow_cleanly(duo_project, tmp_path) -> None:
    """The repair step with a timeout it cannot meet: stopped as the executor stops it, the
    flow ends in `abort`; nothing is published and nothing of the step keeps running."""
    gl = duo_project
    head = gl.head()
    doc = yaml.safe_load(FLOW.read_text())
    (repair,) = [c for c in doc["components"] if c["name"] == "repair"]
    (timeout,) = [i for i in repair["inputs"] if i["as"] == "timeout"]
    timeout["from"] = "5"
    flow = tmp_path / "repair-flow.yaml"
    flow.write_text(yaml.safe_dump(doc, sort_keys=False))

    run, _, _ = run_flow_file(gl, tmp_path, flow, "approve")
    repair_step = run.step("repair")
    assert (repair_step.result, repair_step.timed_out) == ("failed", True)
    assert repair_step.seconds < 5 + 25
    assert run.status == "ERROR"
    assert "did not finish within its timeout of 5 s" in run.context["repair"]["tool_responses"]

    assert gl.head() == head
    assert gl.mr.notes == []
    assert {r.method for r in api_requests(gl)} == {"GET"}
    assert still_running(repair_step.session, within_s=10) == [], "a process of the stopped step lives on"
    worktrees = run_git(tmp_path / "workload", "worktree", "list").splitlines()
    assert len(worktrees) == 1, worktrees  # the flow's worktrees went with it
    # The stopped run says so in its trail (when it got as far as starting one).
    trails = (tmp_path / "workload" / "out").glob("flow-*/trail.json")
    outcomes = [json.loads(trail.read_text())["outcome"] for trail in trails]
    assert set(outcomes) <= {"proposed", "interrupted"}, outcomes


def still_running(session: int | None, *, within_s: float) -> list[str]:
    """The processes of a session (its leader's pid) that have not exited within `within_s`
    (a process the stopped step was ending may take a moment); each with its state and argv."""
    deadline = time.monotonic() + within_s
    while True:
        found = []
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
                argv = (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            # the fields after "(comm)": state, ppid, pgrp, session; a zombie is gone already
            if int(fields[3]) == session and fields[0] != "Z":
                found.append(f"{stat.parent.name} {fields[0]} {argv.strip()}")
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.2)
