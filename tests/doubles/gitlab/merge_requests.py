"""GitLab REST v4 routes for merge requests, notes, commits and files, backed by a real bare git repo.

Mount with ``create_app(state, routers=[merge_requests.router])``; arrange with
`add_repository` and `add_merge_request`. Shapes follow GitLab's API documentation
(``doc/api/merge_requests.md``, ``notes.md``, ``commits.md``, ``repository_files.md``) for
the fields python-gitlab and acklab read. ``POST /repository/commits`` writes with git
plumbing (a private index, ``commit-tree``, ``update-ref`` with the old value) and enforces
``last_commit_id`` the way GitLab does: 400 when the file changed since.
"""

from __future__ import annotations

import base64
import os
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import JSONResponse

from tests.doubles.gitlab.server import State, not_found, paginate, project_or_404
from tests.doubles.gitlab.state import GitLabDouble, Project, now

router = APIRouter()
IDENTITY = {
    "GIT_AUTHOR_NAME": "GitLab double",
    "GIT_AUTHOR_EMAIL": "double@localhost",
    "GIT_COMMITTER_NAME": "GitLab double",
    "GIT_COMMITTER_EMAIL": "double@localhost",
}
FILE_CHANGED = "The file has changed since you started editing it: {path}"


def git(repo: Path, *args: str, input_text: str | None = None, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        ["git", "--git-dir", str(repo), *args],
        input=input_text,
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, **IDENTITY, **(env or {})},
    )
    if done.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout


@dataclass
class MergeRequest:
    iid: int
    source_branch: str
    target_branch: str
    title: str
    id: int = 0
    notes: list[dict[str, Any]] = field(default_factory=list)
    created_at: str = field(default_factory=now)


def add_repository(project: Project, bare: Path) -> None:
    """Serve `bare` (a bare git repository) as the project's repository."""
    project.extra["repository"] = Path(bare)
    project.extra.setdefault("merge_requests", {})


def add_merge_request(
    state: GitLabDouble,
    project: Project,
    *,
    iid: int,
    source_branch: str,
    target_branch: str = "main",
    title: str = "MR",
) -> MergeRequest:
    mr = MergeRequest(
        iid=iid, source_branch=source_branch, target_branch=target_branch, title=title, id=state.next_id()
    )
    project.extra.setdefault("merge_requests", {})[iid] = mr
    return mr


def _repo(project: Project) -> Path:
    repo = project.extra.get("repository")
    if repo is None:
        raise not_found("Repository Not Found")
    return Path(repo)


def _mr_or_404(project: Project, iid: int) -> MergeRequest:
    mr = project.extra.get("merge_requests", {}).get(iid)
    if mr is None:
        raise not_found("Not found")
    return mr


def _branch_head(repo: Path, branch: str) -> str | None:
    try:
        return git(repo, "rev-parse", "--verify", "--quiet", f"refs/heads/{branch}").strip() or None
    except RuntimeError:
        return None


def commit_json(state: GitLabDouble, project: Project, repo: Path, sha: str) -> dict[str, Any]:
    fmt = "%H%x00%h%x00%s%x00%B%x00%an%x00%ae%x00%aI%x00%cn%x00%ce%x00%cI%x00%P"
    fields = git(repo, "show", "-s", f"--format={fmt}", sha).rstrip("\n").split("\x00")
    full, short, title, message, an, ae, ad, cn, ce, cd, parents = fields
    return {
        "id": full,
        "short_id": short,
        "title": title,
        "message": message,
        "author_name": an,
        "author_email": ae,
        "authored_date": ad,
        "committer_name": cn,
        "committer_email": ce,
        "committed_date": cd,
        "created_at": cd,
        "parent_ids": parents.split(),
        "web_url": f"{state.base_url}/{project.path_with_namespace}/-/commit/{full}",
    }


def mr_json(state: GitLabDouble, project: Project, mr: MergeRequest) -> dict[str, Any]:
    repo = _repo(project)
    head = _branch_head(repo, mr.source_branch)
    target = _branch_head(repo, mr.target_branch)
    base = git(repo, "merge-base", head, target).strip() if head and target else None
    return {
        "id": mr.id,
        "iid": mr.iid,
        "project_id": project.id,
        "title": mr.title,
        "state": "opened",
        "source_branch": mr.source_branch,
        "target_branch": mr.target_branch,
        "source_project_id": project.id,
        "target_project_id": project.id,
        "sha": head,
        "diff_refs": {"base_sha": base, "head_sha": head, "start_sha": target},
        "web_url": f"{state.base_url}/{project.path_with_namespace}/-/merge_requests/{mr.iid}",
        "created_at": mr.created_at,
        "merge_status": "can_be_merged",
        "draft": False,
    }


@router.get("/projects/{project_id:path}/merge_requests/{iid:int}")
def get_merge_request(project_id: str, iid: int, state: State) -> dict[str, Any]:
    project = project_or_404(state, project_id)
    return mr_json(state, project, _mr_or_404(project, iid))


@router.get("/projects/{project_id:path}/merge_requests/{iid:int}/notes")
def list_notes(project_id: str, iid: int, request: Request, state: State) -> JSONResponse:
    mr = _mr_or_404(project_or_404(state, project_id), iid)
    return paginate(request, mr.notes)


@router.post("/projects/{project_id:path}/merge_requests/{iid:int}/notes", status_code=201)
async def create_note(project_id: str, iid: int, request: Request, state: State) -> dict[str, Any]:
    mr = _mr_or_404(project_or_404(state, project_id), iid)
    body = (await request.json()).get("body")
    if not body:
        raise HTTPException(status_code=400, detail="400 Bad request - body is missing")
    note = {
        "id": state.next_id(),
        "body": body,
        "noteable_type": "MergeRequest",
        "noteable_iid": iid,
        "system": False,
        "created_at": now(),
        "author": {"username": "acklab-bot"},
    }
    with state.lock:
        mr.notes.append(note)
    return note


@router.get("/projects/{project_id:path}/repository/commits")
def list_commits(project_id: str, request: Request, state: State) -> JSONResponse:
    project = project_or_404(state, project_id)
    repo = _repo(project)
    ref = request.query_params.get("ref_name") or project.default_branch
    try:  # a branch, a tag or a commit sha, as GitLab accepts
        git(repo, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    except RuntimeError as exc:
        raise not_found("Reference Not Found") from exc
    args = ["log", "--format=%H", ref]
    if request.query_params.get("path"):
        args += ["--", request.query_params["path"]]
    shas = git(repo, *args).split()
    return paginate(request, [commit_json(state, project, repo, sha) for sha in shas])


@router.post("/projects/{project_id:path}/repository/commits", status_code=201)
async def create_commit(project_id: str, request: Request, state: State) -> dict[str, Any]:
    project = project_or_404(state, project_id)
    repo = _repo(project)
    doc = await request.json()
    branch, message, actions = doc.get("branch"), doc.get("commit_message"), doc.get("actions")
    if not (branch and message and isinstance(actions, list) and actions):
        raise HTTPException(status_code=400, detail="branch, commit_message, actions are missing")
    with state.lock:
        head = _branch_head(repo, branch)
        if head is None:
            raise HTTPException(
                status_code=400, detail="You can only create or edit files when you are on a branch"
            )
        with tempfile.TemporaryDirectory() as tmp:
            env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
            git(repo, "read-tree", head, env=env)
            for action in actions:
                _apply_action(repo, head, action, env)
            tree = git(repo, "write-tree", env=env).strip()
        commit = git(repo, "commit-tree", tree, "-p", head, "-m", message).strip()
        git(repo, "update-ref", f"refs/heads/{branch}", commit, head)
    return commit_json(state, project, repo, commit)


def _apply_action(repo: Path, head: str, action: dict[str, Any], env: dict[str, str]) -> None:
    kind, path = action.get("action"), action.get("file_path", "")
    exists = bool(git(repo, "ls-tree", head, "--", path).strip())
    if kind == "create" and exists:
        raise HTTPException(status_code=400, detail="A file with this name already exists")
    if kind in ("update", "delete") and not exists:
        raise HTTPException(status_code=400, detail="A file with this name doesn't exist")
    last_commit_id = action.get("last_commit_id")
    if last_commit_id is not None:
        last = git(repo, "log", "-1", "--format=%H", head, "--", path).strip()
        if last != last_commit_id:
            raise HTTPException(status_code=400, detail=FILE_CHANGED.format(path=path))
    if kind == "delete":
        git(repo, "update-index", "--remove", "--force-remove", path, env=env)
        return
    if kind not in ("create", "update"):
        raise HTTPException(status_code=400, detail=f"Unknown action {kind!r}")
    content = action.get("content", "")
    if action.get("encoding") == "base64":
        content = base64.b64decode(content).decode("utf-8")
    blob = git(repo, "hash-object", "-w", "--stdin", input_text=content).strip()
    git(repo, "update-index", "--add", "--cacheinfo", f"100644,{blob},{path}", env=env)


@router.get("/projects/{project_id:path}/repository/files/{file_path:path}")
def get_file(project_id: str, file_path: str, request: Request, state: State) -> dict[str, Any]:
    project = project_or_404(state, project_id)
    repo = _repo(project)
    ref = request.query_params.get("ref")
    if not ref:
        raise HTTPException(status_code=400, detail="ref is missing")
    commit = _branch_head(repo, ref) or ref
    try:
        content = git(repo, "show", f"{commit}:{file_path}")
        blob = git(repo, "rev-parse", f"{commit}:{file_path}").strip()
    except RuntimeError as exc:
        raise not_found("File Not Found") from exc
    last = git(repo, "log", "-1", "--format=%H", commit, "--", file_path).strip()
    return {
        "file_name": file_path.rsplit("/", 1)[-1],
        "file_path": file_path,
        "size": len(content.encode()),
        "encoding": "base64",
        "content": base64.b64encode(content.encode()).decode(),
        "content_sha256": "",
        "ref": ref,
        "blob_id": blob,
        "commit_id": commit,
        "last_commit_id": last,
    }
