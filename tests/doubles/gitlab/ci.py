"""GitLab REST v4 routes for projects, pipelines, jobs and job artifacts (as python-gitlab calls them).

Shapes follow GitLab's API documentation (``doc/api/projects.md``, ``pipelines.md``,
``jobs.md``): the fields python-gitlab and acklab read are real, the rest is trimmed.
``:id`` is a numeric id or a URL-encoded full path (``group%2Fproject``).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from tests.doubles.gitlab.server import State, not_found, paginate, project_or_404
from tests.doubles.gitlab.state import GitLabDouble, Job, Pipeline, Project, now

router = APIRouter()
project_router = APIRouter()  # mounted last: its {project_id:path} would swallow the others


def project_json(state: GitLabDouble, project: Project) -> dict[str, Any]:
    web = f"{state.base_url}/{project.path_with_namespace}"
    namespace = project.path_with_namespace.rsplit("/", 1)[0] if "/" in project.path_with_namespace else ""
    return {
        "id": project.id,
        "name": project.name,
        "path": project.name,
        "path_with_namespace": project.path_with_namespace,
        "name_with_namespace": project.path_with_namespace.replace("/", " / "),
        "namespace": {"full_path": namespace, "kind": "group"},
        "default_branch": project.default_branch,
        "visibility": "private",
        "web_url": web,
        "http_url_to_repo": f"{web}.git",
        "created_at": "2026-01-01T00:00:00.000Z",
    }


def pipeline_json(state: GitLabDouble, project: Project, pipeline: Pipeline) -> dict[str, Any]:
    return {
        "id": pipeline.id,
        "iid": pipeline.iid,
        "project_id": project.id,
        "sha": pipeline.sha,
        "ref": pipeline.ref,
        "status": pipeline.status,
        "source": pipeline.source,
        "tag": False,
        "created_at": pipeline.created_at,
        "updated_at": now(),
        "web_url": f"{state.base_url}/{project.path_with_namespace}/-/pipelines/{pipeline.id}",
    }


def job_json(state: GitLabDouble, project: Project, job: Job) -> dict[str, Any]:
    pipeline = project.pipelines[job.pipeline_id]
    artifacts = []
    if job.artifacts is not None:
        artifacts.append(
            {
                "file_type": "archive",
                "size": len(job.artifacts),
                "filename": "artifacts.zip",
                "file_format": "zip",
            }
        )
    found: dict[str, Any] = {
        "id": job.id,
        "name": job.name,
        "stage": job.stage,
        "status": job.status,
        "ref": job.ref,
        "tag": False,
        "allow_failure": False,
        "created_at": job.created_at,
        "commit": {"id": job.sha, "short_id": job.sha[:8]},
        "pipeline": {
            "id": pipeline.id,
            "project_id": project.id,
            "ref": pipeline.ref,
            "sha": pipeline.sha,
            "status": pipeline.status,
        },
        "artifacts": artifacts,
        "web_url": f"{state.base_url}/{project.path_with_namespace}/-/jobs/{job.id}",
    }
    if job.artifacts is not None:
        found["artifacts_file"] = {"filename": "artifacts.zip", "size": len(job.artifacts)}
    return found


def _pipeline_or_404(project: Project, pipeline_id: int) -> Pipeline:
    pipeline = project.pipelines.get(pipeline_id)
    if pipeline is None:
        raise not_found("Not found")
    return pipeline


def _job_or_404(state: GitLabDouble, project: Project, job_id: int) -> Job:
    job = state.find_job(project, job_id)
    if job is None:
        raise not_found("Not found")
    return job


@router.get("/projects/{project_id:path}/pipelines/{pipeline_id:int}/jobs")
def list_pipeline_jobs(project_id: str, pipeline_id: int, request: Request, state: State) -> JSONResponse:
    """GET /projects/:id/pipelines/:pipeline_id/jobs — newest first; ``scope[]`` filters by status."""
    project = project_or_404(state, project_id)
    pipeline = _pipeline_or_404(project, pipeline_id)
    scopes = request.query_params.getlist("scope[]") + request.query_params.getlist("scope")
    jobs = sorted(pipeline.jobs, key=lambda j: j.id, reverse=True)
    if scopes:
        jobs = [j for j in jobs if j.status in scopes]
    return paginate(request, [job_json(state, project, j) for j in jobs])


FINISHED = ("success", "failed", "canceled", "skipped")


@router.get("/projects/{project_id:path}/pipelines")
def list_pipelines(project_id: str, request: Request, state: State) -> JSONResponse:
    """GET /projects/:id/pipelines — ``ref``, ``status``, ``scope`` (finished, running, ...),
    ``order_by`` (id, updated_at) and ``sort`` (desc, the default, or asc)."""
    project = project_or_404(state, project_id)
    query = request.query_params
    pipelines = list(project.pipelines.values())
    if query.get("ref"):
        pipelines = [p for p in pipelines if p.ref == query["ref"]]
    if query.get("status"):
        pipelines = [p for p in pipelines if p.status == query["status"]]
    scope = query.get("scope")
    if scope == "finished":
        pipelines = [p for p in pipelines if p.status in FINISHED]
    elif scope in ("running", "pending"):
        pipelines = [p for p in pipelines if p.status == scope]
    pipelines.sort(key=lambda p: p.id, reverse=query.get("sort", "desc") != "asc")
    return paginate(request, [pipeline_json(state, project, p) for p in pipelines])


@router.get("/projects/{project_id:path}/pipelines/{pipeline_id:int}")
def get_pipeline(project_id: str, pipeline_id: int, state: State) -> dict[str, Any]:
    """GET /projects/:id/pipelines/:pipeline_id"""
    project = project_or_404(state, project_id)
    return pipeline_json(state, project, _pipeline_or_404(project, pipeline_id))


@router.get("/projects/{project_id:path}/jobs/{job_id:int}/artifacts")
def get_job_artifacts(project_id: str, job_id: int, state: State) -> Response:
    """GET /projects/:id/jobs/:job_id/artifacts — the archive's bytes; 404 when the job has none."""
    project = project_or_404(state, project_id)
    job = _job_or_404(state, project, job_id)
    if job.artifacts is None:
        raise not_found("Not found")
    if state.artifact_storage:
        # GitLab with object storage: a redirect to a pre-signed URL on another host.
        location = f"{state.artifact_storage}/artifacts/{job.id}.zip?X-Amz-Expires=300&X-Amz-Signature=d0ub1e"
        return Response(status_code=302, headers={"location": location})
    return Response(
        job.artifacts,
        media_type="application/zip",
        headers={"content-disposition": 'attachment; filename="artifacts.zip"'},
    )


@router.get("/projects/{project_id:path}/jobs/{job_id:int}")
def get_job(project_id: str, job_id: int, state: State) -> dict[str, Any]:
    """GET /projects/:id/jobs/:job_id"""
    project = project_or_404(state, project_id)
    return job_json(state, project, _job_or_404(state, project, job_id))


@project_router.get("/projects/{project_id:path}")
def get_project(project_id: str, state: State) -> dict[str, Any]:
    """GET /projects/:id (numeric id or URL-encoded path)"""
    return project_json(state, project_or_404(state, project_id))
