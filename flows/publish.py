"""Publishing a verified patch: to a new local branch, or to the merge request through python-gitlab.

Both refuse (exit 5) when the head moved since the flow started. On GitLab the MR is re-read
right before committing; only the scoped files are committed (Commits API), each with
`last_commit_id`, GitLab's per-file optimistic lock; a note with the verdicts follows.
Nothing is ever force-pushed or merged. python-gitlab's errors are converted here.

Which GitLab and which credential is what the environment says, never guessed: in a GitLab
Duo flow (`flows.duo.in_flow`) the instance is `GITLAB_BASE_URL`, the project
`DUO_WORKFLOW_PROJECT_ID` and `GITLAB_TOKEN` an OAuth token, sent as `Authorization: Bearer`
(GitLab answers 401 to an OAuth token sent as `PRIVATE-TOKEN`); anywhere else `GITLAB_URL`
or `CI_SERVER_URL`, `CI_PROJECT_ID`, and `GITLAB_TOKEN` as a private token, else the job token.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

from acklab.evidence.gitlab_access import strip_credentials
from acklab.evidence.redaction import remember

from . import duo
from .errors import FlowSpecInvalid, HeadMoved, PublishFailed
from .worktree import Worktree, git, head_sha, identity_env

# GitLab's message when last_commit_id no longer matches the file's last commit
_FILE_CHANGED = "changed since you started editing"


class Publisher(Protocol):
    """Where a verified patch goes."""

    name: str

    def precheck(self, expected_sha: str) -> dict[str, Any] | None:
        """Refuse early when the head already differs; return the MR's identity for the trail."""
        ...

    def publish(
        self,
        checkout: Worktree,
        *,
        run_id: str,
        expected_sha: str,
        paths: Sequence[str],
        message: str,
        note: str,
    ) -> dict[str, Any]:
        """Publish `paths` of `checkout`; return what was published (for the trail)."""
        ...


class NoPublisher:
    """Neither --local nor --mr: the verified patch stays in the trail (outcome "applied")."""

    name = "none"

    def precheck(self, expected_sha: str) -> dict[str, Any] | None:
        return None

    def publish(
        self,
        checkout: Worktree,
        *,
        run_id: str,
        expected_sha: str,
        paths: Sequence[str],
        message: str,
        note: str,
    ) -> dict[str, Any]:  # pragma: no cover - the runner skips publish for NoPublisher
        return {}


@dataclass
class LocalPublisher:
    """`--local`: commit the scoped files to a new local branch; the checkout stays as it is."""

    repo: Path
    branch_prefix: str = "acklab/repair-"
    name: str = "local"

    def precheck(self, expected_sha: str) -> dict[str, Any] | None:
        return None

    def publish(
        self,
        checkout: Worktree,
        *,
        run_id: str,
        expected_sha: str,
        paths: Sequence[str],
        message: str,
        note: str,
    ) -> dict[str, Any]:
        current = head_sha(self.repo)
        if current != expected_sha:
            raise HeadMoved(
                f"HEAD moved from {expected_sha[:12]} to {current[:12]} during the flow; "
                "nothing was committed. Run the flow again on the new head"
            )
        branch = f"{self.branch_prefix}{run_id}"
        git(checkout.path, "add", "--", *paths)
        staged = git(checkout.path, "diff", "--cached", "--name-only").stdout.split()
        if sorted(staged) != sorted(paths):
            raise PublishFailed(f"the commit would change {staged}, not {list(paths)}; nothing committed")
        git(checkout.path, "commit", "--quiet", "--no-verify", "-m", message, env=identity_env(self.repo))
        commit = head_sha(checkout.path)
        git(self.repo, "branch", branch, commit)
        return {"mode": "local", "branch": branch, "commit": commit, "files": list(paths)}


Auth = Literal["private", "job", "oauth"]
# How each credential reaches GitLab, and what to check when it is refused.
_CREDENTIAL = {
    "private": "GITLAB_TOKEN (a token with the api scope)",
    "job": "CI_JOB_TOKEN (it may not commit: set GITLAB_TOKEN)",
    "oauth": "the flow's OAuth token (GITLAB_TOKEN): the service account needs the Developer role",
}


@dataclass
class GitLabPublisher:
    """`--mr IID`: commit to the merge request's source branch with python-gitlab."""

    url: str
    token: str
    auth: Auth
    project_id: str
    mr_iid: int
    name: str = "gitlab"

    @classmethod
    def from_env(cls, mr_iid: int, env: Mapping[str, str] | None = None) -> GitLabPublisher:
        env = os.environ if env is None else env
        if duo.in_flow(env):
            return cls._in_flow(mr_iid, env)
        url = env.get("GITLAB_URL") or env.get("CI_SERVER_URL")
        auth: Auth = "private" if env.get("GITLAB_TOKEN") else "job"
        token = env.get("GITLAB_TOKEN") if auth == "private" else env.get("CI_JOB_TOKEN")
        project = env.get("CI_PROJECT_ID")
        needed = (
            ("GITLAB_URL (or CI_SERVER_URL)", url),
            ("GITLAB_TOKEN (or CI_JOB_TOKEN)", token),
            ("CI_PROJECT_ID", project),
        )
        return cls._made(mr_iid, needed, auth, "set them, or use --local")

    @classmethod
    def _in_flow(cls, mr_iid: int, env: Mapping[str, str]) -> GitLabPublisher:
        # A flow has no CI/CD variables of the project and no CI_SERVER_URL: its own only.
        needed = (
            ("GITLAB_BASE_URL", env.get("GITLAB_BASE_URL")),
            ("GITLAB_TOKEN", env.get("GITLAB_TOKEN")),
            (duo.PROJECT_ID, env.get(duo.PROJECT_ID) or env.get(duo.PROJECT_PATH)),
        )
        why = f"GitLab sets them in every Duo flow ({duo.MARKER} is set here)"
        return cls._made(mr_iid, needed, "oauth", why)

    @classmethod
    def _made(
        cls, mr_iid: int, needed: tuple[tuple[str, str | None], ...], auth: Auth, fix: str
    ) -> GitLabPublisher:
        missing = [name for name, value in needed if not value]
        if missing:
            raise FlowSpecInvalid(f"publishing to !{mr_iid} needs {', '.join(missing)}; {fix}")
        url, token, project = (str(value) for _, value in needed)
        # A user:password@ in the URL is never sent (requests would turn it into Basic auth
        # beside the token) and never written: the token comes from the variables above.
        url, removed = strip_credentials(url)
        remember(*removed)
        return cls(url=url, token=token, auth=auth, project_id=project, mr_iid=mr_iid)

    def _project(self) -> Any:
        import gitlab

        if self.auth == "oauth":
            client = gitlab.Gitlab(self.url, oauth_token=self.token, timeout=60)
        elif self.auth == "job":
            client = gitlab.Gitlab(self.url, job_token=self.token, timeout=60)
        else:
            client = gitlab.Gitlab(self.url, private_token=self.token, timeout=60)
        return client.projects.get(self.project_id, lazy=True)

    def head(self) -> duo.MergeRequestHead:
        """Where the merge request's head is (read from GitLab), to fetch it before the flow."""
        with _gitlab_errors(f"reading merge request !{self.mr_iid}", self.auth):
            mr = self._merge_request(self._project())
        return duo.MergeRequestHead(
            iid=self.mr_iid,
            sha=str(mr.sha),
            source_branch=str(mr.source_branch),
            source_project=str(mr.source_project_id),
            target_project=str(mr.target_project_id),
        )

    def _merge_request(self, project: Any) -> Any:
        return project.mergerequests.get(self.mr_iid)

    def precheck(self, expected_sha: str) -> dict[str, Any] | None:
        with _gitlab_errors(f"reading merge request !{self.mr_iid}", self.auth):
            mr = self._merge_request(self._project())
        if mr.sha != expected_sha:
            raise HeadMoved(
                f"merge request !{self.mr_iid} is at {str(mr.sha)[:12]}, but the checkout is at "
                f"{expected_sha[:12]}; fetch the MR's head and run the flow on it"
            )
        return {"project": str(self.project_id), "iid": int(self.mr_iid), "web_url": str(mr.web_url or "")}

    def publish(
        self,
        checkout: Worktree,
        *,
        run_id: str,
        expected_sha: str,
        paths: Sequence[str],
        message: str,
        note: str,
    ) -> dict[str, Any]:
        project = self._project()
        with _gitlab_errors(f"re-reading merge request !{self.mr_iid}", self.auth):
            mr = self._merge_request(project)
        if mr.sha != expected_sha:
            raise HeadMoved(
                f"merge request !{self.mr_iid} moved from {expected_sha[:12]} to {str(mr.sha)[:12]} "
                "during the flow; nothing was published. Run the flow again on the new head"
            )
        actions = []
        for path in paths:
            with _gitlab_errors(f"finding the last commit of {path}", self.auth):
                # The file's last commit as of the expected head, not the branch's current one:
                # looked up on the branch, a change pushed meanwhile would become our
                # last_commit_id and the lock would wave it through. (python-gitlab takes
                # `path=` as the request path and drops other keyword arguments once
                # query_parameters is given, so both go in query_parameters.)
                query = {"ref_name": expected_sha, "path": path}
                last = project.commits.list(query_parameters=query, per_page=1, get_all=False)
            if not last:
                raise PublishFailed(f"{path} has no commit at {expected_sha[:12]}; nothing published")
            actions.append(
                {
                    "action": "update",
                    "file_path": path,
                    "content": checkout.read(path),
                    "last_commit_id": last[0].id,
                }
            )
        with _gitlab_errors(f"committing to {mr.source_branch}", self.auth):
            commit = project.commits.create(
                {"branch": mr.source_branch, "commit_message": message, "actions": actions}
            )
        with _gitlab_errors(f"posting the note on !{self.mr_iid}", self.auth):
            posted = mr.notes.create({"body": note})
        return {
            "mode": "gitlab",
            "merge_request": int(self.mr_iid),
            "branch": str(mr.source_branch),
            "commit": str(commit.id),
            "files": list(paths),
            "note_id": int(posted.id),
            "web_url": str(getattr(commit, "web_url", "") or ""),
        }


class _gitlab_errors:
    """Convert python-gitlab and transport errors at the boundary, naming what was being done."""

    def __init__(self, doing: str, auth: Auth) -> None:
        self.doing = doing
        self.auth = auth

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        if exc is None:
            return
        import gitlab.exceptions as gle
        import requests

        if isinstance(exc, gle.GitlabAuthenticationError):
            raise PublishFailed(
                f"GitLab refused the credentials while {self.doing} (HTTP {exc.response_code}); "
                f"check {_CREDENTIAL[self.auth]}"
            ) from exc
        if isinstance(exc, gle.GitlabError):
            text = str(exc.error_message)
            if exc.response_code == 400 and _FILE_CHANGED in text:
                raise HeadMoved(
                    f"GitLab refused the commit while {self.doing}: {text} (the scoped file changed "
                    "on the branch during the flow); nothing was published"
                ) from exc
            raise PublishFailed(
                f"GitLab answered HTTP {exc.response_code} while {self.doing}: {text}"
            ) from exc
        if isinstance(exc, requests.RequestException):
            raise PublishFailed(f"cannot reach GitLab while {self.doing}: {exc}") from exc
