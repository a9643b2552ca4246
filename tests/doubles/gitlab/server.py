"""The GitLab double's app factory, shared route helpers, and a live server on 127.0.0.1.

Compose it::

    state = GitLabDouble(private_tokens={"glpat-test"})
    app = create_app(state, routers=[merge_requests.router])   # ci routes are always mounted
    with serve(app) as base_url:
        gl = gitlab.Gitlab(base_url, private_token="glpat-test")

Routers get the state with a ``state: State`` parameter; every route under ``/api/v4`` requires
a token (``PRIVATE-TOKEN``, ``JOB-TOKEN`` or ``Authorization: Bearer``; an OAuth token only as
``Bearer``, never as ``PRIVATE-TOKEN``, as GitLab does) and answers 401
``{"message": "401 Unauthorized"}`` otherwise, as GitLab does; the PyPI registry's routes take
HTTP Basic credentials instead (``pypi.py``); ``/group/project.git`` answers git over smart HTTP
(``git_http.py``). `paginate` sends GitLab's
pagination headers (``x-page``, ``x-per-page``, ``x-total``, ``x-total-pages``,
``x-next-page``, ``x-prev-page`` and ``Link``) so python-gitlab's ``get_all=True`` walks pages.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Annotated, Any
from urllib.parse import parse_qs, urlencode

import uvicorn
from fastapi import APIRouter, Depends, FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tests.doubles.gitlab.state import GitLabDouble, Project
from tests.doubles.gitlab.state import Request as LoggedRequest

__all__ = [
    "GitLabDouble",
    "State",
    "create_app",
    "get_state",
    "not_found",
    "paginate",
    "project_or_404",
    "serve",
]

API = "/api/v4"


def get_state(request: Request) -> GitLabDouble:
    """FastAPI dependency: the double's state."""
    state: GitLabDouble = request.app.state.gitlab
    return state


State = Annotated[GitLabDouble, Depends(get_state)]
"""Route parameter type that injects the double's state: ``def route(state: State)``."""


def not_found(what: str = "Not found") -> HTTPException:
    """GitLab's 404 shape: ``{"message": "404 Project Not Found"}``."""
    return HTTPException(status_code=404, detail=f"404 {what}")


def project_or_404(state: GitLabDouble, project_id: str) -> Project:
    project = state.find_project(project_id)
    if project is None:
        raise not_found("Project Not Found")
    return project


def paginate(request: Request, items: Sequence[Any]) -> JSONResponse:
    """A JSON list page with GitLab's pagination headers (``page``/``per_page`` query, max 100)."""
    try:
        page = max(1, int(request.query_params.get("page", "1")))
        per_page = min(100, max(1, int(request.query_params.get("per_page", "20"))))
    except ValueError:
        page, per_page = 1, 20
    total = len(items)
    pages = max(1, -(-total // per_page))
    chunk = list(items[(page - 1) * per_page : page * per_page])
    base = str(request.base_url).rstrip("/") + request.url.path
    other = [(k, v) for k, v in request.query_params.multi_items() if k not in ("page", "per_page")]

    def link(n: int) -> str:
        return f"{base}?{urlencode([*other, ('page', str(n)), ('per_page', str(per_page))])}"

    links = [f'<{link(page + 1)}>; rel="next"'] if page < pages else []
    links += [f'<{link(page - 1)}>; rel="prev"'] if page > 1 else []
    links += [f'<{link(1)}>; rel="first"', f'<{link(pages)}>; rel="last"']
    headers = {
        "x-page": str(page),
        "x-per-page": str(per_page),
        "x-total": str(total),
        "x-total-pages": str(pages),
        "x-next-page": str(page + 1) if page < pages else "",
        "x-prev-page": str(page - 1) if page > 1 else "",
        "link": ", ".join(links),
    }
    return JSONResponse(chunk, headers=headers)


class _TokenGate:
    """ASGI middleware: authenticate every /api/v4 request and log it (without the token)."""

    def __init__(self, app: ASGIApp, state: GitLabDouble) -> None:
        self.app = app
        self.state = state

    def _auth(self, headers: dict[str, str], query: str) -> tuple[str | None, bool]:
        params = parse_qs(query)
        if "private_token" in params:
            return "private", params["private_token"][0] in self.state.private_tokens
        if "job_token" in params:
            return "job", params["job_token"][0] in self.state.job_tokens
        if "private-token" in headers:
            # GitLab reads PRIVATE-TOKEN as a personal, project or group access token only:
            # an OAuth token sent there is refused (401), as a Duo flow's GITLAB_TOKEN would be.
            return "private", headers["private-token"] in self.state.private_tokens
        if "job-token" in headers:
            return "job", headers["job-token"] in self.state.job_tokens
        bearer = headers.get("authorization", "")
        if bearer.lower().startswith("bearer "):
            token = bearer[7:]
            accepted = self.state.private_tokens | self.state.job_tokens | self.state.oauth_tokens
            return "bearer", token in accepted
        return None, False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        from tests.doubles.gitlab import pypi

        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        query = scope.get("query_string", b"").decode("latin-1")
        refusal: Response = JSONResponse({"message": "401 Unauthorized"}, status_code=401)
        if pypi.is_pypi(scope["path"]):
            credential = pypi.authenticate(self.state, headers)
            kind, ok = (credential.kind, True) if credential else (None, False)
            scope.setdefault("state", {})["gitlab_credential"] = credential
            refusal = pypi.unauthorized()
        else:
            kind, ok = self._auth(headers, query)
        status: list[int] = []

        def log(code: int) -> None:
            with self.state.lock:
                self.state.requests.append(
                    LoggedRequest(
                        method=scope["method"],
                        path=scope["path"],
                        query=_without_tokens(query),
                        auth=kind,
                        status=code,
                    )
                )

        async def logging_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                # Logged before the client can read the answer: a test that asserts on the last
                # request right after its call returned would otherwise race the server thread.
                status.append(int(message["status"]))
                log(status[0])
            await send(message)

        try:
            if scope["path"].startswith(API) and not ok:
                await refusal(scope, receive, logging_send)
            else:
                await self.app(scope, receive, logging_send)
        finally:
            if not status:  # no answer started: the app raised
                log(500)


def _without_tokens(query: str) -> str:
    pairs = parse_qs(query, keep_blank_values=True)
    return urlencode(
        [(k, v) for k, vs in pairs.items() if k not in ("private_token", "job_token") for v in vs]
    )


def create_app(state: GitLabDouble, routers: Sequence[APIRouter] = ()) -> FastAPI:
    """The double as an ASGI app: the CI routes, plus `routers` (each mounted under /api/v4)."""
    from tests.doubles.gitlab import ci, git_http, pypi

    app = FastAPI(title="GitLab API double", openapi_url=None, docs_url=None, redoc_url=None)
    app.state.gitlab = state

    @app.exception_handler(HTTPException)
    async def gitlab_error(request: Request, exc: HTTPException) -> JSONResponse:
        return JSONResponse({"message": exc.detail}, status_code=exc.status_code)

    # Specific routes first: the project route's {project_id:path} would match their paths too.
    for router in [*routers, pypi.router, ci.router]:
        app.include_router(router, prefix=API)
    app.include_router(ci.project_router, prefix=API)
    # git clone http://HOST/group/project.git: what gitlab-ci-local fetches includes with.
    app.add_route("/{repository:path}.git/{rest:path}", git_http.serve_git, methods=["GET", "POST"])
    app.add_middleware(_TokenGate, state=state)
    return app


@contextmanager
def serve(app: FastAPI) -> Iterator[str]:
    """Run `app` with uvicorn in a thread on a free 127.0.0.1 port; yield its base URL."""
    # IPPROTO_TCP so asyncio turns Nagle off on accepted sockets (else ~40 ms per response).
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off", ws="none")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    base_url = f"http://127.0.0.1:{port}"
    state = getattr(app.state, "gitlab", None)
    if isinstance(state, GitLabDouble):
        state.base_url = base_url
    try:
        for _ in range(500):
            if server.started:
                break
            if not thread.is_alive():
                raise RuntimeError("the GitLab double's server thread died while starting")
            threading.Event().wait(0.01)
        else:
            raise RuntimeError("the GitLab double did not start within 5 s")
        yield base_url
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()
