"""What a GitLab Duo Agent Platform flow's environment says, read once.

A flow runs as a CI workload of its own, not as a job of the project's pipeline
(docs.gitlab.com, user/duo_agent_platform/flows/execution/execution-variables): the
project's CI/CD variables, `CI_SERVER_URL`, `CI_MERGE_REQUEST_IID` and `GITLAB_USER_LOGIN`
are not there. It has instead `GITLAB_BASE_URL`, `GITLAB_TOKEN` (an OAuth token),
`DUO_WORKFLOW_PROJECT_ID`, the person who triggered it (`DUO_WORKFLOW_GIT_USER_NAME`,
`_EMAIL`) and its goal (`DUO_WORKFLOW_GOAL`, the `context:goal` of the flow).

The merge request comes in the goal, in the shape of the trigger that started the flow
(user/duo_agent_platform/flows/custom_flows_schema, "Goal values by trigger type"):
"Assign reviewer" passes the merge request's IID, "Pipeline failed" passes the pipeline
event's webhook payload, whose `merge_request` names it; a merge request URL is read too.
Anything else is refused (exit 3), never guessed.

The runner clones the workload at depth 1, at a ref of its own: the merge request's head
is fetched before the flow reads it (`fetch_merge_request_head`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import GoalInvalid, HeadMoved
from .escape import visible
from .worktree import git

# Set in every flow (the flow's definition, e.g. "developer/v1"): the one sign of a flow.
MARKER = "DUO_WORKFLOW_DEFINITION"
GOAL = "DUO_WORKFLOW_GOAL"
PROJECT_ID = "DUO_WORKFLOW_PROJECT_ID"
PROJECT_PATH = "GITLAB_PROJECT_PATH"
USER_NAME = "DUO_WORKFLOW_GIT_USER_NAME"
USER_EMAIL = "DUO_WORKFLOW_GIT_USER_EMAIL"
# A pipeline event's payload is a few kilobytes; a goal past this is not one.
MAX_GOAL_BYTES = 1 << 20
_IID = re.compile(r"[1-9][0-9]{0,9}")
_MR_URL = re.compile(r"https?://[^/\s]+/(?P<project>[^\s?#]+?)/-/merge_requests/(?P<iid>[1-9][0-9]{0,9})/?")
TRIGGERS = (
    "an Assign reviewer trigger passes the merge request's IID (e.g. 12), a Pipeline failed "
    "trigger the pipeline event of a merge request pipeline"
)


def in_flow(env: Mapping[str, str]) -> bool:
    """Whether this process runs in a GitLab Duo flow (its definition is set), as GitLab says."""
    return bool(env.get(MARKER))


def triggered_by(env: Mapping[str, str]) -> str | None:
    """Who triggered the flow, "Name <email>" (escaped to one line), or None outside a flow."""
    name, email = env.get(USER_NAME, "").strip(), env.get(USER_EMAIL, "").strip()
    if not (name or email):
        return None
    who = f"{name} <{email}>" if name and email else name or email
    return visible(who, keep_newlines=False)


def merge_request_from_goal(env: Mapping[str, str]) -> int:
    """The merge request IID the flow's goal names; GoalInvalid (exit 3) for anything else."""
    goal = env.get(GOAL)
    if goal is None or not goal.strip():
        raise GoalInvalid(
            f"--mr goal reads the merge request from the flow's goal ({GOAL}), which is not set: "
            f"run this step in a GitLab Duo flow ({TRIGGERS}), or pass --mr IID"
        )
    if len(goal.encode("utf-8", "surrogatepass")) > MAX_GOAL_BYTES:
        raise GoalInvalid(f"the flow's goal is {len(goal)} characters, past {MAX_GOAL_BYTES}; {TRIGGERS}")
    text = goal.strip()
    if _IID.fullmatch(text):
        return int(text)
    url = _MR_URL.fullmatch(text)
    if url:
        return _from_url(url, env)
    if text.startswith("{"):
        return _from_pipeline_event(text, env)
    raise GoalInvalid(f"the flow's goal names no merge request: got {_shown(text)}; {TRIGGERS}")


def _from_url(url: re.Match[str], env: Mapping[str, str]) -> int:
    project = env.get(PROJECT_PATH)
    if project and url["project"] != project:
        raise GoalInvalid(
            f"the flow's goal is a merge request of {url['project']!r}, but the flow runs in "
            f"{project!r}; it repairs merge requests of its own project only"
        )
    return int(url["iid"])


def _from_pipeline_event(text: str, env: Mapping[str, str]) -> int:
    try:
        event = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise GoalInvalid(f"the flow's goal looks like JSON but is not: {exc}; {TRIGGERS}") from exc
    if not isinstance(event, dict) or event.get("object_kind") != "pipeline":
        kind = event.get("object_kind") if isinstance(event, dict) else type(event).__name__
        raise GoalInvalid(
            f"the flow's goal is JSON but not a pipeline event (object_kind {_shown(kind)}); {TRIGGERS}"
        )
    request = event.get("merge_request")
    if not isinstance(request, dict):
        found = event.get("object_attributes")
        attributes: dict[str, Any] = found if isinstance(found, dict) else {}
        raise GoalInvalid(
            f"the pipeline event names no merge request (pipeline {_shown(attributes.get('id'))} ran for "
            f"ref {_shown(attributes.get('ref'))}, not for a merge request): the flow repairs merge "
            "requests; trigger it on merge request pipelines"
        )
    iid = request.get("iid")
    if not isinstance(iid, int) or isinstance(iid, bool) or iid < 1:
        raise GoalInvalid(f"the pipeline event's merge_request has no IID (got {_shown(iid)}); {TRIGGERS}")
    ours, theirs = env.get(PROJECT_ID), request.get("target_project_id")
    if ours and theirs is not None and str(theirs) != ours:
        raise GoalInvalid(
            f"the pipeline event's merge request !{iid} belongs to project {_shown(theirs)}, but the flow "
            f"runs in project {ours}; it repairs merge requests of its own project only"
        )
    return iid


def _shown(value: Any) -> str:
    """A value from the goal, fit to quote: escaped, cut short, a string in quotes."""
    text = value if isinstance(value, str) else json.dumps(value)
    if len(text) > 120:
        text = text[:120] + "…"
    text = visible(text, keep_newlines=False)
    return repr(text) if isinstance(value, str) else text


@dataclass(frozen=True)
class MergeRequestHead:
    """Where a merge request's head is: its commit and the branch that holds it."""

    iid: int
    sha: str
    source_branch: str
    source_project: str
    target_project: str


def fetch_merge_request_head(repo: Path, head: MergeRequestHead) -> str:
    """Fetch the merge request's source branch into `repo` (a workload's depth-1 clone holds
    another ref) and return its head; HeadMoved (exit 5) when it is no longer the one GitLab
    named. Only the objects come (and origin's remote-tracking ref): no local branch, tag or
    checkout of `repo` changes."""
    if head.source_project != head.target_project:
        raise HeadMoved(
            f"merge request !{head.iid} comes from another project ({head.source_project}); the flow "
            "publishes to branches of its own project only, and nothing was run"
        )
    git(repo, "fetch", "--quiet", "--no-tags", "origin", f"refs/heads/{head.source_branch}")
    fetched = git(repo, "rev-parse", "--verify", "FETCH_HEAD^{commit}").stdout.strip()
    if fetched != head.sha:
        raise HeadMoved(
            f"merge request !{head.iid} is at {head.sha[:12]}, but its branch {head.source_branch!r} "
            f"fetched at {fetched[:12]}: it moved; run the flow again"
        )
    return fetched
