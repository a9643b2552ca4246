"""The GitLab double's MR routes, driven by the real python-gitlab client."""

from __future__ import annotations

import base64

import gitlab
import pytest

pytestmark = pytest.mark.slow


def project(gitlab_mr):
    return gitlab.Gitlab(gitlab_mr.url, private_token=gitlab_mr.token).projects.get(42, lazy=True)


def test_merge_request_sha_follows_the_branch(gitlab_mr):
    mr = project(gitlab_mr).mergerequests.get(1)
    assert mr.sha == gitlab_mr.head()
    assert mr.source_branch == "feature/orders"
    assert mr.diff_refs["head_sha"] == mr.sha
    assert mr.diff_refs["start_sha"] == gitlab_mr.head("main")
    moved = gitlab_mr.push_commit("NOTES.md", "x\n", "someone else")
    assert project(gitlab_mr).mergerequests.get(1).sha == moved


def test_commits_by_path_give_the_files_last_commit_not_the_head(gitlab_mr):
    proj = project(gitlab_mr)
    [last] = proj.commits.list(
        query_parameters={"ref_name": "feature/orders", "path": "app/webhooks.py"}, per_page=1, get_all=False
    )
    assert last.id == gitlab_mr.head("main")
    assert last.id != gitlab_mr.head()


def test_commit_with_last_commit_id_is_an_optimistic_lock(gitlab_mr):
    proj = project(gitlab_mr)
    last = gitlab_mr.head("main")
    gitlab_mr.push_commit("app/webhooks.py", "# changed by someone else\n", "race")
    with pytest.raises(gitlab.exceptions.GitlabCreateError) as info:
        proj.commits.create(
            {
                "branch": "feature/orders",
                "commit_message": "stale",
                "actions": [
                    {
                        "action": "update",
                        "file_path": "app/webhooks.py",
                        "content": "x\n",
                        "last_commit_id": last,
                    }
                ],
            }
        )
    assert info.value.response_code == 400
    assert "changed since you started editing it" in str(info.value.error_message)
    [fresh] = proj.commits.list(
        query_parameters={"ref_name": "feature/orders", "path": "app/webhooks.py"}, per_page=1, get_all=False
    )
    commit = proj.commits.create(
        {
            "branch": "feature/orders",
            "commit_message": "fresh",
            "actions": [
                {
                    "action": "update",
                    "file_path": "app/webhooks.py",
                    "content": "y\n",
                    "last_commit_id": fresh.id,
                }
            ],
        }
    )
    assert commit.id == gitlab_mr.head()
    assert commit.parent_ids == [fresh.id]
    got = proj.files.get("app/webhooks.py", ref="feature/orders")
    assert base64.b64decode(got.content).decode() == "y\n"
    assert got.last_commit_id == commit.id


def test_notes(gitlab_mr):
    mr = project(gitlab_mr).mergerequests.get(1)
    note = mr.notes.create({"body": "hello"})
    assert note.body == "hello"
    assert [n.body for n in mr.notes.list(get_all=True)] == ["hello"]


def test_a_bad_token_is_refused(gitlab_mr):
    gl = gitlab.Gitlab(gitlab_mr.url, private_token="nope")
    with pytest.raises(gitlab.exceptions.GitlabAuthenticationError):
        gl.projects.get(42, lazy=True).mergerequests.get(1)
