"""Publishing to a merge request: python-gitlab against the GitLab double (real HTTP, real bare repo)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest

from acklab.evidence.redaction import redact
from acklab.flows.approvals import AutoApprove, Decision, Question
from acklab.flows.errors import HeadMoved
from acklab.flows.lab import run_lab
from acklab.flows.proposers import make_proposer
from acklab.flows.publish import GitLabPublisher
from acklab.flows.runner import FlowConfig, run_flow
from acklab.flows.sandbox import choose
from acklab.flows.spec import load_spec
from acklab.flows.worktree import head_sha, worktree
from tests.flows.conftest import LIVE, fast_spec, load_trail, run_git, write_decisions

pytestmark = pytest.mark.slow
APPROVE = {"gate": "approve", "decision": "approve", "actor": "release-bot", "delegated_by": "alice"}


@pytest.fixture
def gitlab_env(monkeypatch, gitlab_mr):
    monkeypatch.setenv("GITLAB_URL", gitlab_mr.url)
    monkeypatch.setenv("GITLAB_TOKEN", gitlab_mr.token)
    monkeypatch.setenv("CI_PROJECT_ID", "42")
    for var in ("CI_SERVER_URL", "CI_JOB_TOKEN", "CI_JOB_URL", "CI_MERGE_REQUEST_IID"):
        monkeypatch.delenv(var, raising=False)
    return gitlab_mr


def test_the_merge_request_is_repaired_with_the_scoped_file_only(gitlab_env, tmp_path, acklab):
    gl = gitlab_env
    checkout = gl.clone(tmp_path / "ci-checkout")
    old_head = gl.head()
    out = tmp_path / "out"
    spec = fast_spec(tmp_path, checks=("ruff", "bandit", "pytest"))
    decisions = write_decisions(tmp_path, [APPROVE])
    code, stdout, _ = acklab(
        checkout, "flow", "run", spec, "--mr", "1", "--decisions", decisions, "--out", out, "--json"
    )
    assert code == 0, stdout
    result = json.loads(stdout)
    assert result["outcome"] == "published"

    new_head = gl.head()
    assert result["published"]["commit"] == new_head
    assert run_git(gl.bare, "rev-parse", f"{new_head}^").strip() == old_head  # on top, never forced
    assert run_git(gl.bare, "diff", "--name-only", old_head, new_head).split() == ["app/webhooks.py"]
    assert run_git(gl.bare, "show", f"{new_head}:app/webhooks.py") == LIVE
    assert gl.head("main") != new_head  # never merged

    [note] = gl.mr.notes
    body = note["body"]
    for expected in [
        "lost-ack",
        "conflicting-payload",
        "release-bot",
        "alice",
        "pytest ok",
        result["run_id"],
        "trail.json",
    ]:
        assert expected in body
    assert "exactly-once delivery across systems" in body
    methods = {(r.method, r.path.split("/api/v4")[-1]) for r in gl.state.requests}
    assert ("POST", "/projects/42/repository/commits") in methods
    assert not any("merge" in path and method == "PUT" for method, path in methods)

    trail = load_trail(stdout)
    assert trail["merge_request"] == {
        "project": "42",
        "iid": 1,
        "web_url": f"{gl.url}/shop/orders/-/merge_requests/1",
    }
    assert trail["expected_head_sha"] == old_head
    publish = trail["checkpoints"][-1]
    assert (publish["name"], publish["status"], publish["outputs"]["commit"]) == ("publish", "ok", new_head)
    everything = b"".join(p.read_bytes() for p in out.rglob("*") if p.is_file())
    assert gl.token.encode() not in everything

    # the harness passes on the new head of the merge request
    fresh = gl.clone(tmp_path / "after")
    with worktree(fresh, head_sha(fresh)) as wt:
        after = run_lab(
            wt.path,
            target="fixture:live",
            experiments=["lost-ack", "conflicting-payload"],
            trials=1,
            seed=11,
            out=out,
            sandbox=choose(),
        )
    assert after.verdict == "pass"


@dataclass
class PushThenApprove:
    """Approves, after someone else pushed to the MR's branch (the head moves during the flow)."""

    gitlab_mr: Any
    name: str = "file"

    def decide(self, question: Question) -> Decision:
        self.gitlab_mr.push_commit("NOTES.md", "someone else\n", "A concurrent push")
        return AutoApprove(delegated_by="test").decide(question)


def _config(checkout, tmp_path, decisions, publisher=None):
    spec = load_spec(fast_spec(tmp_path))
    return FlowConfig(
        repo=checkout,
        spec=spec,
        out=tmp_path / "out",
        proposer=make_proposer("recipe", spec),
        decisions=decisions,
        publisher=publisher or GitLabPublisher.from_env(1),
        secrets=[],
        echo=lambda _: None,
    )


def test_a_head_that_moved_during_the_flow_is_refused(gitlab_env, tmp_path):
    gl = gitlab_env
    checkout = gl.clone(tmp_path / "ci-checkout")
    result = run_flow(_config(checkout, tmp_path, PushThenApprove(gl)))
    assert result.exit_code == 5
    assert result.outcome == "refused"
    assert "moved from" in result.detail
    assert "nothing was published" in result.detail
    moved = gl.head()
    assert run_git(gl.bare, "log", "-1", "--format=%s", moved).strip() == "A concurrent push"
    assert gl.mr.notes == []
    trail = json.loads((result.bundle / "trail.json").read_text())
    assert trail["checkpoints"][-1]["name"] == "publish"
    assert trail["checkpoints"][-1]["status"] == "refused"


def test_a_checkout_behind_the_merge_request_is_refused_before_anything_runs(gitlab_env, tmp_path):
    gl = gitlab_env
    checkout = gl.clone(tmp_path / "ci-checkout")
    gl.push_commit("NOTES.md", "newer\n", "Newer work")
    result = run_flow(_config(checkout, tmp_path, AutoApprove(delegated_by="test")))
    assert (result.exit_code, result.outcome) == (5, "refused")
    assert "fetch the MR's head" in result.detail
    trail = json.loads((result.bundle / "trail.json").read_text())
    assert trail["checkpoints"] == []


class RacingPublisher(GitLabPublisher):
    """Someone changes app/webhooks.py right after the flow re-read the MR (GitLab's lock must catch it)."""

    calls = 0
    racer: Any = None  # the GitLab double's merge request, set by the test

    def _merge_request(self, project):
        mr = super()._merge_request(project)
        RacingPublisher.calls += 1
        if RacingPublisher.calls == 2:  # the re-read just before committing
            self.racer.push_commit("app/webhooks.py", "# someone else's handler\n", "Race")
        return mr


def test_gitlabs_per_file_lock_refuses_a_file_changed_in_between(gitlab_env, tmp_path):
    gl = gitlab_env
    checkout = gl.clone(tmp_path / "ci-checkout")
    publisher = RacingPublisher.from_env(1)
    assert isinstance(publisher, RacingPublisher)
    publisher.racer = gl
    RacingPublisher.calls = 0
    result = run_flow(_config(checkout, tmp_path, AutoApprove(delegated_by="test"), publisher))
    assert (result.exit_code, result.outcome) == (5, "refused")
    assert "The file has changed since you started editing it: app/webhooks.py" in result.detail
    assert run_git(gl.bare, "log", "-1", "--format=%s", gl.head()).strip() == "Race"
    assert gl.mr.notes == []


def test_missing_gitlab_settings_name_the_variables(monkeypatch):
    for var in ("GITLAB_URL", "CI_SERVER_URL", "GITLAB_TOKEN", "CI_JOB_TOKEN", "CI_PROJECT_ID"):
        monkeypatch.delenv(var, raising=False)
    from acklab.flows.errors import FlowSpecInvalid

    with pytest.raises(
        FlowSpecInvalid,
        match=r"GITLAB_URL \(or CI_SERVER_URL\), GITLAB_TOKEN \(or CI_JOB_TOKEN\), CI_PROJECT_ID",
    ):
        GitLabPublisher.from_env(3)


def test_ci_variables_are_the_fallbacks():
    publisher = GitLabPublisher.from_env(
        7, env={"CI_SERVER_URL": "https://gitlab.example", "CI_JOB_TOKEN": "job", "CI_PROJECT_ID": "9"}
    )
    assert (publisher.url, publisher.auth, publisher.project_id, publisher.mr_iid) == (
        "https://gitlab.example",
        "job",
        "9",
        7,
    )


def test_credentials_in_the_gitlab_url_are_neither_sent_nor_written():
    publisher = GitLabPublisher.from_env(
        7,
        env={
            "GITLAB_URL": "https://robot:url-secret-7f3a@gitlab.example:8443/",
            "GITLAB_TOKEN": "tok",
            "CI_PROJECT_ID": "9",
        },
    )
    assert publisher.url == "https://gitlab.example:8443/"
    assert "url-secret-7f3a" not in redact("GitLab said: url-secret-7f3a")


def test_head_moved_is_a_gate():
    assert int(HeadMoved("x").exit_code) == 5
