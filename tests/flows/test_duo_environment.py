"""What a GitLab Duo flow's environment tells acklab: the merge request in the goal (an IID,
a merge request URL, a pipeline event's payload; anything else exit 3), the person who
triggered it, and how to publish (GITLAB_BASE_URL and the OAuth token as a bearer, chosen
because the environment says it is a flow); the merge request's head fetched into a depth-1
workload, over real git and the GitLab double."""

from __future__ import annotations

import json
import subprocess

import pytest

from acklab.evidence.exitcodes import ExitCode
from acklab.flows import duo
from acklab.flows.approvals import AutoApprove, Question, invoking_user
from acklab.flows.errors import GoalInvalid, HeadMoved, PublishFailed
from acklab.flows.publish import GitLabPublisher
from tests.doubles.duo.workload import clone_workload
from tests.doubles.gitlab.fixtures import OAUTH_TOKEN
from tests.flows.conftest import run_git

FLOW = {"DUO_WORKFLOW_DEFINITION": "acklab-scoped-repair/v1", "DUO_WORKFLOW_PROJECT_ID": "42"}


def pipeline_event(merge_request: dict[str, object] | None) -> str:
    """A pipeline event's webhook payload, shaped as GitLab's documentation shows it."""
    return json.dumps(
        {
            "object_kind": "pipeline",
            "object_attributes": {
                "id": 31,
                "iid": 3,
                "ref": "feature/orders" if merge_request else "main",
                "status": "failed",
                "source": "merge_request_event" if merge_request else "push",
                "sha": "bcbb5ec396a2c0f828686f14fac9b80b780504f2",
            },
            "merge_request": merge_request,
            "user": {"id": 1, "name": "Jane Developer", "username": "jane"},
            "project": {"id": 42, "path_with_namespace": "shop/orders"},
            "builds": [{"id": 380, "stage": "test", "name": "attack:live", "status": "failed"}],
        }
    )


MERGE_REQUEST = {
    "id": 1001,
    "iid": 7,
    "title": "Ship orders",
    "source_branch": "feature/orders",
    "source_project_id": 42,
    "target_branch": "main",
    "target_project_id": 42,
    "state": "opened",
    "url": "https://gitlab.example.com/shop/orders/-/merge_requests/7",
}


@pytest.mark.parametrize(
    ("goal", "iid"),
    [
        ("7", 7),  # Assign reviewer: the IID
        (" 12\n", 12),
        ("https://gitlab.example.com/shop/orders/-/merge_requests/7", 7),
        (pipeline_event(MERGE_REQUEST), 7),  # Pipeline failed: the event's merge request
    ],
    ids=["iid", "iid-padded", "url", "pipeline-event"],
)
def test_the_goal_names_the_merge_request(goal: str, iid: int) -> None:
    env = {**FLOW, "DUO_WORKFLOW_GOAL": goal, "GITLAB_PROJECT_PATH": "shop/orders"}
    assert duo.merge_request_from_goal(env) == iid


@pytest.mark.parametrize(
    ("goal", "says"),
    [
        (None, "DUO_WORKFLOW_GOAL), which is not set"),
        ("  ", "which is not set"),
        ("0", "names no merge request: got '0'"),
        ("!7", "names no merge request"),
        ("Input: @ai-acklab please fix\nContext: {MergeRequest IID: 7}", "names no merge request"),
        ("https://gitlab.example.com/other/project/-/merge_requests/7", "a merge request of 'other/project'"),
        ("https://gitlab.example.com/shop/orders/-/issues/7", "names no merge request"),
        ('{"object_kind": "push", "ref": "main"}', "not a pipeline event (object_kind 'push')"),
        ("[7]", "names no merge request: got '[7]'"),
        ("{not json", "looks like JSON but is not"),
        ("[" * 100_000 + "]" * 100_000, "names no merge request"),
        ("{" + '"a":{' * 100_000 + "}" * 100_001, "looks like JSON but is not"),
        (pipeline_event(None), "names no merge request (pipeline 31 ran for ref 'main'"),
        (pipeline_event({**MERGE_REQUEST, "iid": "7"}), "has no IID (got '7')"),
        (pipeline_event({**MERGE_REQUEST, "target_project_id": 99}), "belongs to project 99"),
        ("7" * (duo.MAX_GOAL_BYTES + 1), "past"),
    ],
    ids=[
        "unset",
        "blank",
        "zero",
        "bang",
        "mention",
        "other-project-url",
        "issue-url",
        "push-event",
        "json-list",
        "broken-json",
        "deep-list",
        "deep-json",
        "branch-pipeline",
        "string-iid",
        "other-project-event",
        "huge",
    ],
)
def test_anything_else_is_refused_naming_what_it_got(goal: str | None, says: str) -> None:
    env = {**FLOW, "GITLAB_PROJECT_PATH": "shop/orders"}
    if goal is not None:
        env["DUO_WORKFLOW_GOAL"] = goal
    with pytest.raises(GoalInvalid) as raised:
        duo.merge_request_from_goal(env)
    assert says in str(raised.value).replace("merge_request", "merge request")
    assert raised.value.exit_code == ExitCode.INVALID_INPUT


def test_the_cli_exits_3_on_a_goal_naming_no_merge_request_and_runs_nothing(
    sandbox, acklab, monkeypatch, tmp_path
) -> None:
    for name, value in {**FLOW, "DUO_WORKFLOW_GOAL": "please repair the handler"}.items():
        monkeypatch.setenv(name, value)
    out = tmp_path / "out"
    code, _, stderr = acklab(sandbox, "flow", "run", "flows/repair.yaml", "--mr", "goal", "--out", out)
    assert code == 3, stderr
    assert "the flow's goal names no merge request: got 'please repair the handler'" in stderr
    assert not out.exists()


def test_the_approver_is_who_triggered_the_flow(monkeypatch) -> None:
    monkeypatch.setenv("GITLAB_USER_LOGIN", "pipeline-user")  # not in a flow, but never guessed from
    monkeypatch.setenv("DUO_WORKFLOW_GIT_USER_NAME", "Jane Developer")
    monkeypatch.setenv("DUO_WORKFLOW_GIT_USER_EMAIL", "jane@example.com")
    assert invoking_user() == "Jane Developer <jane@example.com>"
    decision = AutoApprove().decide(Question("approve", "p1", "0" * 64, "the diff"))
    assert (decision.actor, decision.delegated_by, decision.source) == (
        "auto",
        "Jane Developer <jane@example.com>",
        "auto",
    )
    monkeypatch.setenv("DUO_WORKFLOW_GIT_USER_NAME", "Jane\nDeveloper\u202e")
    assert "\n" not in invoking_user()
    assert "\u202e" not in invoking_user()


def test_inside_a_flow_the_flows_gitlab_and_an_oauth_token_are_used() -> None:
    env = {
        **FLOW,
        "GITLAB_BASE_URL": "https://gitlab.example.com",
        "GITLAB_TOKEN": "oauth-token",
        "DUO_WORKFLOW_PROJECT_ID": "42",
        # what a flow also has, and must not be taken for its credential or its GitLab
        "CI_JOB_TOKEN": "job-token",
        "CI_SERVER_URL": "https://elsewhere.example.com",
        "CI_PROJECT_ID": "9",
    }
    publisher = GitLabPublisher.from_env(7, env=env)
    assert (publisher.url, publisher.token, publisher.auth, publisher.project_id) == (
        "https://gitlab.example.com",
        "oauth-token",
        "oauth",
        "42",
    )


def test_outside_a_flow_the_token_stays_a_private_token() -> None:
    env = {"GITLAB_URL": "https://gitlab.example.com", "GITLAB_TOKEN": "glpat-x", "CI_PROJECT_ID": "9"}
    publisher = GitLabPublisher.from_env(7, env=env)
    assert (publisher.auth, publisher.token, publisher.project_id) == ("private", "glpat-x", "9")


def test_a_flow_missing_its_variables_names_them() -> None:
    from acklab.flows.errors import FlowSpecInvalid

    with pytest.raises(FlowSpecInvalid, match=r"needs GITLAB_BASE_URL, GITLAB_TOKEN; GitLab sets them"):
        GitLabPublisher.from_env(7, env={**FLOW, "CI_SERVER_URL": "https://x", "CI_JOB_TOKEN": "j"})


def test_the_oauth_token_goes_as_a_bearer_and_gitlab_refuses_it_as_a_private_token(gitlab_mr) -> None:
    env = {**FLOW, "GITLAB_BASE_URL": gitlab_mr.url, "GITLAB_TOKEN": OAUTH_TOKEN}
    head = GitLabPublisher.from_env(1, env=env).head()
    assert (head.sha, head.source_branch) == (gitlab_mr.head(), "feature/orders")
    assert [r.auth for r in gitlab_mr.state.requests] == ["bearer"]

    as_private = GitLabPublisher(
        url=gitlab_mr.url, token=OAUTH_TOKEN, auth="private", project_id="42", mr_iid=1
    )
    with pytest.raises(PublishFailed, match=r"refused the credentials .* \(HTTP 401\)"):
        as_private.head()
    assert (gitlab_mr.state.requests[-1].auth, gitlab_mr.state.requests[-1].status) == ("private", 401)


def test_the_merge_requests_head_is_fetched_into_a_depth_1_workload(gitlab_mr, tmp_path) -> None:
    checkout = clone_workload(gitlab_mr.bare, gitlab_mr.git_url, "w42", tmp_path / "workload")
    assert run_git(checkout, "rev-parse", "--is-shallow-repository").strip() == "true"
    before = run_git(checkout, "rev-parse", "HEAD").strip()
    head = GitLabPublisher(
        url=gitlab_mr.url, token=OAUTH_TOKEN, auth="oauth", project_id="42", mr_iid=1
    ).head()
    with pytest.raises(subprocess.CalledProcessError):
        run_git(checkout, "cat-file", "-e", f"{head.sha}^{{commit}}")  # not in the workload yet

    assert duo.fetch_merge_request_head(checkout, head) == gitlab_mr.head()
    run_git(checkout, "cat-file", "-e", f"{head.sha}^{{commit}}")
    assert run_git(checkout, "rev-parse", "HEAD").strip() == before  # nothing checked out
    assert "feature/orders" not in run_git(checkout, "branch")  # no local branch made

    gitlab_mr.push_commit("NOTES.md", "newer\n", "Newer work")
    with pytest.raises(HeadMoved, match="it moved"):
        duo.fetch_merge_request_head(checkout, head)
    fork = duo.MergeRequestHead(1, head.sha, "feature/orders", source_project="77", target_project="42")
    with pytest.raises(HeadMoved, match="comes from another project"):
        duo.fetch_merge_request_head(checkout, fork)
