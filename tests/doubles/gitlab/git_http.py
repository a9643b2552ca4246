"""Git over smart HTTP for the GitLab double: ``http://HOST/group/project.git`` serves the bare
repository ``state.git_root/group/project.git`` through git's own ``git http-backend`` (CGI).

That is how gitlab-ci-local fetches what another project includes from it: ``include:
project:`` files and ``include: component:`` templates, cloned shallow and filtered
(``--depth=1 --filter=tree:0``), so the repositories are served with
``uploadpack.allowFilter``. Read-only: pushes are refused, as for a public project without
credentials.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import anyio
from starlette.requests import Request
from starlette.responses import Response

from tests.doubles.gitlab.state import GitLabDouble


async def serve_git(request: Request) -> Response:
    """GET info/refs and POST git-upload-pack for a repository under the double's git root."""
    state: GitLabDouble = request.app.state.gitlab
    service = request.query_params.get("service", "") or request.url.path.rsplit("/", 1)[-1]
    if not state.git_root or service == "git-receive-pack":
        return Response("Not found\n", status_code=404, media_type="text/plain")
    body = await request.body()
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "GIT_PROJECT_ROOT": state.git_root,
        "GIT_HTTP_EXPORT_ALL": "1",
        "PATH_INFO": request.url.path,
        "REQUEST_METHOD": request.method,
        "QUERY_STRING": request.url.query,
        "CONTENT_TYPE": request.headers.get("content-type", ""),
        "CONTENT_LENGTH": str(len(body)),
        "HTTP_CONTENT_ENCODING": request.headers.get("content-encoding", ""),
        "GIT_PROTOCOL": request.headers.get("git-protocol", ""),
        "REMOTE_ADDR": "127.0.0.1",
    }

    def backend() -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            ["git", "http-backend"], input=body, env=env, capture_output=True, timeout=60, check=False
        )

    done = await anyio.to_thread.run_sync(backend)
    head, separator, payload = done.stdout.partition(b"\r\n\r\n")
    if not separator:
        head, _, payload = done.stdout.partition(b"\n\n")
    status, headers = 200, {}
    for line in head.decode("latin-1").splitlines():
        name, _, value = line.partition(":")
        if name.lower() == "status":
            status = int(value.split()[0])
        elif name:
            headers[name] = value.strip()
    return Response(payload, status_code=status, headers=headers)


def bare_repository(root: Path, path: str, source: Path) -> Path:
    """Publish `source` (a repository with commits and tags) as ``root/path.git``, served."""
    bare = root / f"{path}.git"
    bare.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "clone", "-q", "--bare", str(source), str(bare)], check=True, timeout=60)
    subprocess.run(["git", "-C", str(bare), "config", "uploadpack.allowFilter", "true"], check=True)
    return bare
