"""Object storage for the GitLab double: where artifact downloads are redirected (another host).

GitLab answers ``GET /projects/:id/jobs/:job_id/artifacts`` with a redirect to a pre-signed
object-storage URL when artifacts live in object storage. This server serves the job's
archive there and keeps the headers of every request it got (``state.storage_requests``),
so a test can show that no GitLab token followed the redirect.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tests.doubles.gitlab.server import serve
from tests.doubles.gitlab.state import GitLabDouble


@contextmanager
def serve_storage(state: GitLabDouble, host: str = "localhost") -> Iterator[str]:
    """Serve the object storage; point the double's artifact downloads at it (on `host`, not 127.0.0.1)."""

    async def artifact(request: Request) -> Response:
        with state.lock:
            state.storage_requests.append(dict(request.headers))
        job_id = int(request.path_params["name"].removesuffix(".zip"))
        job = next(
            (
                j
                for p in state.projects.values()
                for pl in p.pipelines.values()
                for j in pl.jobs
                if j.id == job_id
            ),
            None,
        )
        if job is None or job.artifacts is None or "X-Amz-Signature" not in request.query_params:
            return Response(b"<Error><Code>NoSuchKey</Code></Error>", status_code=404)
        return Response(job.artifacts, media_type="application/zip")

    app = Starlette(routes=[Route("/artifacts/{name}", artifact)])
    with serve(app) as url:  # type: ignore[arg-type]
        state.artifact_storage = url.replace("127.0.0.1", host)
        try:
            yield state.artifact_storage
        finally:
            state.artifact_storage = ""
