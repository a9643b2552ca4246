"""Reading a pipeline's artifacts from GitLab with python-gitlab — the only module that talks to it.

python-gitlab's errors are converted here, at the boundary, and chained:
401 → "token rejected" (exit 4), 403 → "token lacks permission" (exit 4),
404 → "project / pipeline / job not found" (exit 3), no connection → exit 4.

Credentials. Tokens travel in headers only and are never part of a message. The token
goes to GITLAB_URL's origin (scheme, host, port) and nowhere else: GitLab answers an
artifact download with a redirect to object storage, and requests keeps custom headers
(``PRIVATE-TOKEN``, ``JOB-TOKEN``) across redirects — `TokenStaysHome` drops them on every
hop that leaves the origin. Credentials written into the URL itself
(``https://oauth2:glpat-…@gitlab.example.com``) are stripped by `strip_credentials` before
the URL is used or recorded (a pulled manifest names the GitLab it came from).
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gitlab
import requests
from gitlab.exceptions import GitlabAuthenticationError, GitlabError

from acklab.evidence.errors import EvidenceError, EvidenceInvalid
from acklab.evidence.gitlab_access import TOKEN_HEADERS, GitLabAccess, origin, strip_credentials
from acklab.evidence.redaction import redact

__all__ = ["ArtifactJob", "DownloadTooLarge", "GitLabAccess", "PipelineArtifacts", "strip_credentials"]


class TokenStaysHome(requests.Session):
    """A requests session that sends the GitLab token only to GitLab's own origin.

    requests strips ``Authorization`` on a cross-host redirect but keeps every other header:
    GitLab's ``PRIVATE-TOKEN``/``JOB-TOKEN`` would follow a download to object storage.
    """

    def __init__(self, gitlab_url: str) -> None:
        super().__init__()
        self._home = origin(gitlab_url)

    def rebuild_auth(self, prepared_request: requests.PreparedRequest, response: requests.Response) -> None:
        super().rebuild_auth(prepared_request, response)
        if origin(prepared_request.url or "") != self._home:
            for header in TOKEN_HEADERS:
                prepared_request.headers.pop(header, None)


@dataclass(frozen=True)
class ArtifactJob:
    """A job of the pipeline that has an artifact archive."""

    id: int
    name: str
    status: str
    archive_size: int | None = None  # as GitLab lists it (checked again while downloading)


class DownloadTooLarge(EvidenceError):
    """An artifact archive grew past the cap while streaming; the download was abandoned."""


@contextmanager
def gitlab_errors(access: GitLabAccess, what: str) -> Iterator[None]:
    """Convert python-gitlab and connection errors into EvidenceErrors naming `what` and the fix."""
    try:
        yield
    except GitlabAuthenticationError as exc:
        raise EvidenceError(
            f"GitLab at {access.url} rejected the token from {access.from_variable} (401 Unauthorized) "
            f"while reading {what}; check that it is valid, not expired, and has the read_api scope"
        ) from exc
    except GitlabError as exc:
        code = getattr(exc, "response_code", None)
        if code == 404:
            raise EvidenceInvalid(
                f"{what} not found at {access.url} (404); check the id, or that the token from "
                f"{access.from_variable} can see it"
            ) from exc
        if code == 403:
            raise EvidenceError(
                f"the token from {access.from_variable} may not read {what} (403 Forbidden); "
                "a CI_JOB_TOKEN reaches few endpoints — use GITLAB_TOKEN with read_api"
            ) from exc
        raise EvidenceError(
            f"GitLab at {access.url} failed while reading {what}: {redact(str(exc))}"
        ) from exc
    except OSError as exc:  # requests' connection errors are OSErrors
        raise EvidenceError(
            f"cannot reach GitLab at {access.url} ({type(exc).__name__}); check GITLAB_URL / CI_SERVER_URL"
        ) from exc


def gitlab_client(access: GitLabAccess, *, timeout_s: float = 60.0) -> gitlab.Gitlab:
    """A python-gitlab client whose token never leaves GitLab's origin (`TokenStaysHome`)."""
    session = TokenStaysHome(access.url)
    if access.is_job_token:
        return gitlab.Gitlab(access.url, job_token=access.token, timeout=timeout_s, session=session)
    return gitlab.Gitlab(access.url, private_token=access.token, timeout=timeout_s, session=session)


def recent_pipelines(
    access: GitLabAccess, project: str, *, ref: str, last: int, exclude: frozenset[int] = frozenset()
) -> list[int]:
    """The ids of the last `last` finished pipelines of `ref` (newest first), `exclude` left out.

    Finished means success, failed or canceled: a pipeline whose verdict failed is exactly the
    evidence a history must show.
    """
    gl = gitlab_client(access)
    found: list[int] = []
    with gitlab_errors(access, f"the pipelines of project {project!r} on {ref!r}"):
        handle: Any = gl.projects.get(project, lazy=True)
        listed = handle.pipelines.list(
            ref=ref, scope="finished", order_by="id", sort="desc", per_page=min(100, last + len(exclude)),
            iterator=True,
        )  # fmt: skip
        for pipeline in listed:
            if int(pipeline.id) not in exclude:
                found.append(int(pipeline.id))
            if len(found) >= last:
                break
    return found


class PipelineArtifacts:
    """The artifact archives of one pipeline, fetched with the real python-gitlab client."""

    def __init__(self, access: GitLabAccess, project: str, pipeline: int, *, timeout_s: float = 60.0) -> None:
        self.access = access
        self.project_ref = project
        self.pipeline_id = pipeline
        self._gl = gitlab_client(access, timeout_s=timeout_s)
        with gitlab_errors(access, f"project {project!r}"):
            # A job token may not read the project itself; the pipeline read below still checks it.
            self._project: Any = self._gl.projects.get(project, lazy=access.is_job_token)
        with gitlab_errors(access, f"pipeline {pipeline} of project {project!r}"):
            self._pipeline: Any = self._project.pipelines.get(pipeline)

    @property
    def pipeline_url(self) -> str:
        return str(getattr(self._pipeline, "web_url", ""))

    def jobs(self) -> list[ArtifactJob]:
        """Every job of the pipeline, oldest first, with or without artifacts."""
        with gitlab_errors(self.access, f"the jobs of pipeline {self.pipeline_id}"):
            listed = self._pipeline.jobs.list(get_all=True)
        jobs = [
            (
                ArtifactJob(
                    id=int(j.id), name=str(j.name), status=str(j.status), archive_size=_archive_size(j)
                ),
                any(a.get("file_type") == "archive" for a in (j.attributes.get("artifacts") or [])),
            )
            for j in listed
        ]
        self._with_archive = {job.id for job, has in jobs if has}
        return sorted((job for job, _ in jobs), key=lambda j: j.id)

    def has_archive(self, job: ArtifactJob) -> bool:
        return job.id in getattr(self, "_with_archive", set())

    def download(self, job: ArtifactJob, into: Path, *, max_bytes: int | None = None) -> Path:
        """Stream the job's artifact archive into a file under `into`; return its path.

        With `max_bytes`, the download is abandoned (DownloadTooLarge) as soon as it grows past
        it: a server that streams without end costs the disk no more than the cap.
        """
        fd, name = tempfile.mkstemp(dir=into, prefix=f"job-{job.id}-", suffix=".zip")
        path = Path(name)
        written = 0
        handle: Any = self._project.jobs.get(job.id, lazy=True)
        with (
            open(fd, "wb") as fh,
            gitlab_errors(self.access, f"the artifacts of job {job.name!r} ({job.id})"),
        ):
            # The response itself, not python-gitlab's chunk callback: abandoning a download
            # must close its connection here, not leave it to the garbage collector.
            response = self._gl.http_get(
                f"{handle.manager.path}/{handle.encoded_id}/artifacts", streamed=True, raw=True
            )
            if not isinstance(response, requests.Response):  # raw=True: always a Response
                raise EvidenceError(
                    f"GitLab at {self.access.url} answered the artifacts of job {job.id} oddly"
                )
            with contextlib.closing(response):
                for chunk in response.iter_content(chunk_size=1 << 16):
                    written += len(chunk)
                    if max_bytes is not None and written > max_bytes:
                        raise DownloadTooLarge(
                            f"the artifacts of job {job.name!r} ({job.id}) grew past {max_bytes:,} bytes "
                            "while downloading; abandoned"
                        )
                    fh.write(chunk)
        return path


def _archive_size(job: Any) -> int | None:
    for artifact in job.attributes.get("artifacts") or []:
        if isinstance(artifact, dict) and artifact.get("file_type") == "archive":
            size = artifact.get("size")
            return size if isinstance(size, int) and not isinstance(size, bool) else None
    return None
