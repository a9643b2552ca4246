"""The double's state: projects, pipelines, jobs (with artifact zip bytes), package files and
accepted tokens (private, job, OAuth, deploy).

Tests arrange it directly (`add_project`, `add_pipeline`, `add_job`) and read back the
request log. Routers of other helpers keep their own data in `Project.extra`.
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

SHA = "0ff3ae198f8601a285adcf5c0fff204ee6fba5fd"


def now() -> str:
    """GitLab's timestamp style: ISO 8601 with milliseconds and Z."""
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass
class Job:
    id: int
    name: str
    stage: str
    status: str
    pipeline_id: int
    ref: str
    sha: str
    artifacts: bytes | None = None  # the archive (zip) the job uploaded, if any
    created_at: str = field(default_factory=now)


@dataclass
class Pipeline:
    id: int
    iid: int
    project_id: int
    ref: str
    sha: str
    status: str = "success"
    source: str = "merge_request_event"
    created_at: str = field(default_factory=now)
    jobs: list[Job] = field(default_factory=list)


@dataclass
class Project:
    id: int
    path_with_namespace: str
    default_branch: str = "main"
    pipelines: dict[int, Pipeline] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)  # for other routers (MRs, repository ...)

    @property
    def name(self) -> str:
        return self.path_with_namespace.rsplit("/", 1)[-1]


@dataclass(frozen=True)
class DeployToken:
    """A deploy token: its user name and scopes (e.g. read_package_registry, write_package_registry)."""

    username: str
    scopes: frozenset[str]


@dataclass
class PackageFile:
    """One file of a PyPI package version in a project's package registry."""

    project_id: int
    name: str
    version: str
    filename: str
    sha256: str
    requires_python: str
    content: bytes
    uploaded_by: str  # the kind of credential that uploaded it: job, deploy or private


@dataclass
class Request:
    """One request the double served (never the token itself: only which header carried one)."""

    method: str
    path: str
    query: str
    auth: str | None  # "private", "job", "bearer" (a private or OAuth token), "deploy" or None
    status: int


@dataclass
class GitLabDouble:
    """Everything the double serves. Thread-safe enough for one test driving one client."""

    private_tokens: set[str] = field(default_factory=set)
    job_tokens: set[str] = field(default_factory=set)
    # OAuth tokens (a Duo flow's GITLAB_TOKEN): accepted as `Authorization: Bearer` only
    oauth_tokens: set[str] = field(default_factory=set)
    deploy_tokens: dict[str, DeployToken] = field(default_factory=dict)  # token -> what it may do
    projects: dict[int, Project] = field(default_factory=dict)
    requests: list[Request] = field(default_factory=list)
    packages: list[PackageFile] = field(
        default_factory=list
    )  # the PyPI registries (tests/doubles/gitlab/pypi.py)
    base_url: str = ""  # set by the live server: http://127.0.0.1:PORT
    # Object storage (`object_storage.serve_storage`): when set, artifact downloads answer a
    # redirect there, as GitLab does when artifacts live in object storage.
    artifact_storage: str = ""
    # Bare repositories served over git's smart HTTP (`git_http.serve_git`): <git_root>/<path>.git.
    git_root: str = ""
    storage_requests: list[dict[str, str]] = field(default_factory=list)  # headers storage received
    lock: threading.RLock = field(default_factory=threading.RLock)
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1000))

    def next_id(self) -> int:
        with self.lock:
            return next(self._ids)

    def add_project(self, path: str, *, id: int | None = None) -> Project:
        project = Project(id=id if id is not None else self.next_id(), path_with_namespace=path)
        self.projects[project.id] = project
        return project

    def add_pipeline(
        self, project: Project, *, ref: str = "main", sha: str = SHA, status: str = "success"
    ) -> Pipeline:
        pipeline = Pipeline(
            id=self.next_id(),
            iid=len(project.pipelines) + 1,
            project_id=project.id,
            ref=ref,
            sha=sha,
            status=status,
        )
        project.pipelines[pipeline.id] = pipeline
        return pipeline

    def add_job(
        self,
        pipeline: Pipeline,
        name: str,
        *,
        artifacts: bytes | None = None,
        stage: str = "test",
        status: str = "success",
    ) -> Job:
        job = Job(
            id=self.next_id(),
            name=name,
            stage=stage,
            status=status,
            pipeline_id=pipeline.id,
            ref=pipeline.ref,
            sha=pipeline.sha,
            artifacts=artifacts,
        )
        pipeline.jobs.append(job)
        return job

    def find_project(self, id_or_path: str) -> Project | None:
        """A project by numeric id or by its full path (GitLab accepts either)."""
        if id_or_path.isdigit():
            return self.projects.get(int(id_or_path))
        return next((p for p in self.projects.values() if p.path_with_namespace == id_or_path), None)

    def find_job(self, project: Project, job_id: int) -> Job | None:
        return next((j for p in project.pipelines.values() for j in p.jobs if j.id == job_id), None)
