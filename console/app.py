"""The live console: a read-only FastAPI app over an evidence directory.

Routes (all GET/HEAD; every other method answers 405):

    /                                        overview (?page=N)
    /bundles/{key}                           one bundle (a sweep: its heatmap and nested runs)
    /bundles/{key}/incidents/{incident_id}   an incident's timeline (?page=N: 200 deliveries a page)
    /bundles/{key}/trail                     a repair trail
    /bundles/{key}/pipeline                  pipeline evidence of a bundle
    /pipelines                               every bundle by pipeline (?page=N)
    /compare                                 comparable pairs; with ?left=&right=[&event=&step=] one comparison
    /history                                 verdict per pipeline for each target x experiment
    /raw/{key}/{path}                        a bundle's file, as data
    /static/{name}                           the console's CSS, JS and icon
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.responses import FileResponse, HTMLResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException

from . import details, views
from .index import EvidenceIndex
from .links import LiveLinks
from .render import Site, render
from .security import (
    LOOPBACK_NAMES,
    RAW_CSP,
    HostCheckMiddleware,
    ReadOnlyMiddleware,
    media_type,
    resolve_inside,
)

STATIC_DIR = Path(__file__).parent / "static"
GET_HEAD = ["GET", "HEAD"]


def _int(value: str | None, default: int = 1) -> int:
    try:
        return int(value) if value is not None else default
    except ValueError:
        return default


class NotFound(StarletteHTTPException):
    """A 404 that names what was not found (rendered as the console's error page)."""

    def __init__(self, what: str) -> None:
        super().__init__(status_code=404, detail=what)


def create_app(
    evidence: Path, *, refresh_interval: float = 1.0, hosts: Iterable[str] = LOOPBACK_NAMES
) -> FastAPI:
    """The console app over `evidence`; the index is built here, not at import time.

    `hosts`: the names a request's ``Host`` may carry (`security.served_hosts`); by default
    the loopback's.
    """
    index = EvidenceIndex(evidence, refresh_interval=refresh_interval)
    index.snapshot()  # warm the index before the first request, so it answers quickly
    site = Site(static=False, evidence=str(evidence))
    links = LiveLinks()
    app = FastAPI(title="acklab console", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.index = index

    def ctx() -> views.Context:
        return views.Context(index, index.snapshot(), links, site)

    def html(body: str | None, what: str) -> HTMLResponse:
        if body is None:
            raise NotFound(what)
        return HTMLResponse(body)

    @app.api_route("/", methods=GET_HEAD, response_class=HTMLResponse)
    def overview(page: str | None = None) -> HTMLResponse:
        return HTMLResponse(views.overview(ctx(), _int(page)))

    @app.api_route("/bundles/{key}", methods=GET_HEAD, response_class=HTMLResponse)
    def bundle(key: str, page: str | None = None) -> HTMLResponse:
        return html(views.bundle(ctx(), key, _int(page)), f"no bundle {key!r} in the evidence directory")

    @app.api_route("/bundles/{key}/incidents/{incident_id}", methods=GET_HEAD, response_class=HTMLResponse)
    def incident(key: str, incident_id: str, page: str | None = None) -> HTMLResponse:
        return html(
            details.incident(ctx(), key, incident_id, _int(page)),
            f"no incident {incident_id!r} in bundle {key!r}",
        )

    @app.api_route("/bundles/{key}/trail", methods=GET_HEAD, response_class=HTMLResponse)
    def trail(key: str) -> HTMLResponse:
        return html(details.trail(ctx(), key), f"bundle {key!r} has no repair trail")

    @app.api_route("/bundles/{key}/pipeline", methods=GET_HEAD, response_class=HTMLResponse)
    def pipeline(key: str) -> HTMLResponse:
        return html(views.pipeline(ctx(), key), f"no bundle {key!r} in the evidence directory")

    @app.api_route("/pipelines", methods=GET_HEAD, response_class=HTMLResponse)
    def pipelines(page: str | None = None) -> HTMLResponse:
        return HTMLResponse(views.pipelines(ctx(), _int(page)))

    @app.api_route("/compare", methods=GET_HEAD, response_class=HTMLResponse)
    def compare(
        left: str | None = None,
        right: str | None = None,
        event: str | None = None,
        step: str | None = None,
        page: str | None = None,
    ) -> HTMLResponse:
        if not left and not right:
            return HTMLResponse(details.compare_index(ctx(), _int(page)))
        # no step given: the comparison opens where the handlers first differ
        body = details.compare(ctx(), left, right, event, None if step is None else _int(step))
        return html(body, "left= and right= must each name an incident as bundle:incident_id")

    @app.api_route("/history", methods=GET_HEAD, response_class=HTMLResponse)
    def history() -> HTMLResponse:
        return HTMLResponse(views.history_view(ctx()))

    @app.api_route("/raw/{key}/{rel:path}", methods=GET_HEAD)
    def raw(key: str, rel: str) -> Response:
        found = index.snapshot().by_key.get(key)
        path = resolve_inside(found.path, rel) if found is not None else None
        # The bundle must itself stay inside the evidence directory (a symlinked bundle may not).
        if path is None or not path.is_relative_to(index.root):
            raise NotFound(f"no file {rel!r} in bundle {key!r}")
        kind = media_type(path)
        headers = {"Content-Security-Policy": RAW_CSP, "Cache-Control": "no-cache"}
        if kind == "application/octet-stream":
            headers["Content-Disposition"] = "attachment"
        return FileResponse(path, media_type=kind, headers=headers)

    @app.api_route("/favicon.ico", methods=GET_HEAD)
    def favicon() -> Response:
        # Browsers ask for it when showing a raw JSON file, which has no <link rel=icon>.
        return FileResponse(STATIC_DIR / "favicon.svg", media_type="image/svg+xml")

    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        if exc.status_code == 405:
            return Response("405 Method Not Allowed\n", status_code=405, headers={"Allow": "GET, HEAD"})
        title = "Not found" if exc.status_code == 404 else f"Error {exc.status_code}"
        message = str(exc.detail) if exc.status_code == 404 else "The console could not answer this request."
        body = render("error.html", links=links, site=site, title=title, message=message, nav="")
        return HTMLResponse(body, status_code=exc.status_code)

    app.add_middleware(ReadOnlyMiddleware)
    app.add_middleware(HostCheckMiddleware, hosts=frozenset(h.lower() for h in hosts))
    return app
