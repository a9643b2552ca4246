"""GitLab's PyPI package registry for a project: the upload twine calls, the simple index pip reads.

Routes (GitLab ``doc/api/packages/pypi.md``, ``lib/api/pypi_packages.rb``)::

    POST /projects/:id/packages/pypi                            upload one file (multipart, as twine sends it)
    GET  /projects/:id/packages/pypi/simple                     the project's package index (HTML)
    GET  /projects/:id/packages/pypi/simple/:package_name       the files of one package (HTML, #sha256=)
    GET  /projects/:id/packages/pypi/files/:sha256/:file_name   one file's bytes

Authentication is HTTP Basic only, as GitLab's routes declare it (``job_token_allowed:
:basic_auth``, ``deploy_token_allowed``, ``basic_auth_personal_access_token``): a CI job token
with the user name ``gitlab-ci-token``; a deploy token (any user name; ``read_package_registry``
to read, ``write_package_registry`` to upload); or a personal access token (any user name).
A job token in a ``JOB-TOKEN`` header is refused here. Without valid credentials the answer
is 401 with ``WWW-Authenticate: Basic realm="GitLab Packages Registry"``; a deploy token
without the scope gets 403. A file name already uploaded to the same package and version is
refused with GitLab's 400 ("File name has already been taken"); a ``sha256_digest`` that does
not match the bytes is refused too (the double checks what a corrupted upload would hide).
"""

from __future__ import annotations

import base64
import hashlib
import html
import re
from dataclasses import dataclass

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response

from tests.doubles.gitlab.server import State, not_found, project_or_404
from tests.doubles.gitlab.state import DeployToken, GitLabDouble, PackageFile, Project

router = APIRouter()

CI_JOB_USER = "gitlab-ci-token"
REALM = {"www-authenticate": 'Basic realm="GitLab Packages Registry"'}
PATH = re.compile(r"^/api/v4/projects/.+?/packages/pypi(?:/|$)")  # an id, or a full path (encoded or not)
SHA256 = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class Credential:
    """Who a request authenticated as: "job", "deploy" or "private", and what it may do."""

    kind: str
    deploy: DeployToken | None = None

    def may(self, action: str) -> bool:
        if self.deploy is not None:
            return f"{action}_package_registry" in self.deploy.scopes
        return True  # a job token or a personal access token (api scope) of a project member


def is_pypi(path: str) -> bool:
    return PATH.match(path) is not None


def authenticate(state: GitLabDouble, headers: dict[str, str]) -> Credential | None:
    """The credential of a PyPI route's request (HTTP Basic), or None (answer 401)."""
    scheme, _, encoded = headers.get("authorization", "").partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        user, _, password = base64.b64decode(encoded, validate=True).decode().partition(":")
    except (ValueError, UnicodeDecodeError):
        return None
    if not user or not password:
        return None
    if user == CI_JOB_USER:  # GitLab tries the job token only, and fails when it is not one
        return Credential("job") if password in state.job_tokens else None
    if password in state.deploy_tokens:
        return Credential("deploy", state.deploy_tokens[password])
    if password in state.private_tokens:
        return Credential("private")
    return None


def unauthorized() -> JSONResponse:
    return JSONResponse({"message": "401 Unauthorized"}, status_code=401, headers=REALM)


def _credential(request: Request, action: str) -> Credential:
    credential: Credential = request.state.gitlab_credential
    if not credential.may(action):
        raise HTTPException(status_code=403, detail="403 Forbidden")
    return credential


def normalize(name: str) -> str:
    """PEP 503's normalized name, as GitLab's PackagesFinder matches it."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _files(state: GitLabDouble, project: Project, name: str | None = None) -> list[PackageFile]:
    with state.lock:
        return [
            f
            for f in state.packages
            if f.project_id == project.id and (name is None or normalize(f.name) == normalize(name))
        ]


def _bad_request(message: str) -> HTTPException:
    return HTTPException(status_code=400, detail=f"400 Bad request - {message}")


@router.post("/projects/{project_id:path}/packages/pypi")
async def upload(project_id: str, request: Request, state: State) -> JSONResponse:
    """POST /projects/:id/packages/pypi — one file of a package version, as twine uploads it."""
    project = project_or_404(state, project_id)
    credential = _credential(request, "write")
    async with request.form() as form:
        for field in ("content", "name", "version"):
            if not form.get(field):
                return JSONResponse({"error": f"{field} is missing"}, status_code=400)
        content = form["content"]
        if isinstance(content, str) or not content.filename:
            return JSONResponse({"error": "content is invalid"}, status_code=400)
        filename, data = content.filename, await content.read()
        fields = {k: str(v) for k, v in form.items() if isinstance(v, str)}
    digest = fields.get("sha256_digest", "")
    if digest and not SHA256.match(digest):
        return JSONResponse({"error": "sha256_digest is invalid"}, status_code=400)
    sha256 = hashlib.sha256(data).hexdigest()
    if digest and digest != sha256:
        raise _bad_request("sha256_digest does not match the uploaded file")
    name, version = fields["name"], fields["version"]
    with state.lock:
        taken = any(
            f.filename == filename and normalize(f.name) == normalize(name) and f.version == version
            for f in _files(state, project)
        )
        if taken:
            raise _bad_request("Validation failed: File name has already been taken")
        state.packages.append(
            PackageFile(
                project_id=project.id,
                name=name,
                version=version,
                filename=filename,
                sha256=sha256,
                requires_python=fields.get("requires_python", ""),
                content=data,
                uploaded_by=credential.kind,
            )
        )
    return JSONResponse({"message": "201 Created"}, status_code=201)


def _page(title: str, links: list[str]) -> HTMLResponse:
    body = "".join(f"    {link}<br>\n" for link in links)
    text = (
        "<!DOCTYPE html>\n<html>\n  <head>\n"
        f"    <title>{html.escape(title)}</title>\n  </head>\n  <body>\n"
        f"    <h1>{html.escape(title)}</h1>\n{body}  </body>\n</html>\n"
    )
    return HTMLResponse(text)


def _api(state: GitLabDouble, project: Project) -> str:
    return f"{state.base_url}/api/v4/projects/{project.id}/packages/pypi"


@router.get("/projects/{project_id:path}/packages/pypi/simple")
def simple_index(project_id: str, request: Request, state: State) -> HTMLResponse:
    """GET /projects/:id/packages/pypi/simple — one link per package of the project."""
    project = project_or_404(state, project_id)
    _credential(request, "read")
    names = sorted({normalize(f.name): f.name for f in _files(state, project)}.items())
    links = [
        f'<a href="{html.escape(_api(state, project))}/simple/{html.escape(norm)}" '
        f'data-requires-python="">{html.escape(name)}</a>'
        for norm, name in names
    ]
    return _page(f"Links for {project.name}", links)


@router.get("/projects/{project_id:path}/packages/pypi/simple/{package_name}/")  # what pip asks for
@router.get("/projects/{project_id:path}/packages/pypi/simple/{package_name}")
def simple_package(project_id: str, package_name: str, request: Request, state: State) -> HTMLResponse:
    """GET /projects/:id/packages/pypi/simple/:package_name — its files, each with #sha256=."""
    project = project_or_404(state, project_id)
    _credential(request, "read")
    files = _files(state, project, package_name)
    if not files:
        raise not_found("Package Not Found")
    links = [
        f'<a href="{html.escape(_api(state, project))}/files/{f.sha256}/{html.escape(f.filename)}'
        f'#sha256={f.sha256}" data-requires-python="{html.escape(f.requires_python)}">'
        f"{html.escape(f.filename)}</a>"
        for f in files
    ]
    return _page(f"Links for {files[0].name}", links)


@router.get("/projects/{project_id:path}/packages/pypi/files/{sha256}/{file_name}")
def download(project_id: str, sha256: str, file_name: str, request: Request, state: State) -> Response:
    """GET /projects/:id/packages/pypi/files/:sha256/:file_identifier — the file's bytes."""
    project = project_or_404(state, project_id)
    _credential(request, "read")
    found = next((f for f in _files(state, project) if (f.sha256, f.filename) == (sha256, file_name)), None)
    if found is None:
        raise not_found("Not found")
    return Response(found.content, media_type="application/octet-stream")
