"""The GitLab double answers as GitLab does where python-gitlab and acklab depend on it."""

import httpx
import pytest
from fastapi import APIRouter

from tests.doubles.gitlab.server import State, create_app, project_or_404, serve
from tests.doubles.gitlab.state import GitLabDouble


def test_requests_without_a_valid_token_get_gitlabs_401(gitlab_double):
    gitlab_double.state.add_project("acme/shop", id=1)
    for headers in (
        {},
        {"PRIVATE-TOKEN": "wrong"},
        {"JOB-TOKEN": "wrong"},
        {"Authorization": "Bearer wrong"},
    ):
        response = httpx.get(f"{gitlab_double.url}/api/v4/projects/1", headers=headers)
        assert response.status_code == 401
        assert response.json() == {"message": "401 Unauthorized"}
    response = httpx.get(f"{gitlab_double.url}/api/v4/projects/1?private_token={gitlab_double.private_token}")
    assert response.status_code == 200
    assert "private_token" not in gitlab_double.state.requests[-1].query  # the log never keeps a token


def test_projects_by_id_or_url_encoded_path_and_gitlab_404s(gitlab_double):
    gitlab_double.state.add_project("acme/sub/shop", id=5)
    headers = {"PRIVATE-TOKEN": gitlab_double.private_token}
    by_path = httpx.get(f"{gitlab_double.url}/api/v4/projects/acme%2Fsub%2Fshop", headers=headers)
    assert by_path.json()["id"] == 5
    assert by_path.json()["path_with_namespace"] == "acme/sub/shop"
    missing = httpx.get(f"{gitlab_double.url}/api/v4/projects/6/pipelines/1", headers=headers)
    assert (missing.status_code, missing.json()) == (404, {"message": "404 Project Not Found"})


def test_job_lists_carry_gitlabs_pagination_headers(gitlab_double):
    state = gitlab_double.state
    pipeline = state.add_pipeline(state.add_project("acme/shop", id=1))
    for n in range(5):
        state.add_job(pipeline, f"job-{n}", artifacts=b"PK" if n == 3 else None)
    url = f"{gitlab_double.url}/api/v4/projects/1/pipelines/{pipeline.id}/jobs"
    response = httpx.get(
        url, params={"per_page": 2, "page": 2}, headers={"PRIVATE-TOKEN": gitlab_double.private_token}
    )
    h = response.headers
    assert (h["x-page"], h["x-per-page"], h["x-total"], h["x-total-pages"]) == ("2", "2", "5", "3")
    assert (h["x-next-page"], h["x-prev-page"]) == ("3", "1")
    assert 'rel="next"' in h["link"]
    assert "page=3" in h["link"]
    assert [j["name"] for j in response.json()] == ["job-2", "job-1"]  # newest first
    [with_archive] = [
        j for j in httpx.get(url, headers={"JOB-TOKEN": gitlab_double.job_token}).json() if j["artifacts"]
    ]
    assert with_archive["artifacts"][0]["file_type"] == "archive"


def test_other_routers_mount_beside_the_ci_routes():
    router = APIRouter()

    @router.get("/projects/{project_id:path}/merge_requests/{iid:int}")
    def merge_request(project_id: str, iid: int, state: State) -> dict[str, object]:
        project = project_or_404(state, project_id)
        return {"iid": iid, "project_id": project.id, "sha": project.extra["head"]}

    state = GitLabDouble(private_tokens={"t"})
    state.add_project("acme/shop", id=3).extra["head"] = "abc"
    with serve(create_app(state, routers=[router])) as url:
        got = httpx.get(f"{url}/api/v4/projects/acme%2Fshop/merge_requests/7", headers={"PRIVATE-TOKEN": "t"})
        assert got.json() == {"iid": 7, "project_id": 3, "sha": "abc"}
        assert httpx.get(f"{url}/api/v4/projects/3", headers={"PRIVATE-TOKEN": "t"}).json()["id"] == 3


@pytest.mark.parametrize("path", ["/api/v4/projects/1/jobs/1/artifacts", "/api/v4/projects/1/jobs/1"])
def test_unknown_jobs_are_404(gitlab_double, path):
    gitlab_double.state.add_project("acme/shop", id=1)
    response = httpx.get(gitlab_double.url + path, headers={"PRIVATE-TOKEN": gitlab_double.private_token})
    assert response.status_code == 404
