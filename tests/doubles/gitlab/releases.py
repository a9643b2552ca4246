"""GitLab REST v4 routes for releases (``doc/api/releases/_index.md``), on the project's real
bare repository: a release names a tag that exists there (or is created from ``ref``).

Mount with ``create_app(state, routers=[releases.router])``; the project needs a repository
(`merge_requests.add_repository`). For a CI/CD Catalog project a release is a catalog version:
`tests.pipeline.components.catalog_version` resolves component references against
`released(project)`.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import JSONResponse

from tests.doubles.gitlab.merge_requests import commit_json, git
from tests.doubles.gitlab.server import State, not_found, paginate, project_or_404
from tests.doubles.gitlab.state import GitLabDouble, Project, now

router = APIRouter()


def released(project: Project) -> list[str]:
    """The tags the project has released, oldest first."""
    return [r["tag_name"] for r in project.extra.get("releases", [])]


def _tag_commit(project: Project, tag: str) -> str | None:
    repo = project.extra.get("repository")
    if repo is None:
        raise not_found("Repository Not Found")
    try:
        return git(repo, "rev-parse", "--verify", "--quiet", f"refs/tags/{tag}^{{commit}}").strip() or None
    except RuntimeError:
        return None


@router.post("/projects/{project_id:path}/releases", status_code=201)
async def create_release(project_id: str, request: Request, state: State) -> dict[str, Any]:
    project = project_or_404(state, project_id)
    doc = await request.json()
    tag = doc.get("tag_name")
    if not isinstance(tag, str) or not tag:
        raise HTTPException(status_code=400, detail="400 Bad request - tag_name is missing")
    with state.lock:
        if tag in released(project):
            raise HTTPException(status_code=409, detail="Release already exists")
        sha = _tag_commit(project, tag)
        if sha is None:
            ref = doc.get("ref")
            if not ref:
                raise HTTPException(status_code=422, detail="Ref is not specified")
            sha = git(project.extra["repository"], "rev-parse", "--verify", f"{ref}^{{commit}}").strip()
            git(project.extra["repository"], "tag", tag, sha)
        release = _release_json(state, project, doc, tag, sha)
        project.extra.setdefault("releases", []).append(release)
    return release


def _release_json(
    state: GitLabDouble, project: Project, doc: dict[str, Any], tag: str, sha: str
) -> dict[str, Any]:
    created = now()
    return {
        "tag_name": tag,
        "name": doc.get("name") or tag,
        "description": doc.get("description") or "",
        "created_at": created,
        "released_at": doc.get("released_at") or created,
        "upcoming_release": False,
        "commit": commit_json(state, project, project.extra["repository"], sha),
        "assets": {"links": (doc.get("assets") or {}).get("links", []), "sources": []},
        "_links": {"self": f"{state.base_url}/{project.path_with_namespace}/-/releases/{tag}"},
    }


@router.get("/projects/{project_id:path}/releases")
def list_releases(project_id: str, request: Request, state: State) -> JSONResponse:
    project = project_or_404(state, project_id)
    newest_first = sorted(project.extra.get("releases", []), key=lambda r: r["released_at"], reverse=True)
    return paginate(request, newest_first)


@router.get("/projects/{project_id:path}/releases/{tag_name}")
def get_release(project_id: str, tag_name: str, state: State) -> dict[str, Any]:
    project = project_or_404(state, project_id)
    for release in project.extra.get("releases", []):
        if release["tag_name"] == tag_name:
            return dict(release)
    raise not_found("Not Found")
