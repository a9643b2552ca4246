"""The runner's step for a job's `release:` keyword (``doc/ci/yaml/_index.md#release``): once
the job's script succeeded, the release is created through the Releases API with the job
token, from the keyword's values with the job's variables expanded.

gitlab-ci-local 4.64.1 runs the script and ignores the keyword; the pipeline tests take this
step themselves, from the job as the pipeline resolves it, against the GitLab double."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

FIELDS = ("tag_name", "name", "description", "ref", "released_at")
_VARIABLE = re.compile(r"\$(?:\{(?P<braced>\w+)\}|(?P<plain>\w+))")


def expand(value: str, variables: Mapping[str, str]) -> str:
    """`$NAME` and `${NAME}` replaced by the job's variables (an unset one is empty, as in GitLab)."""
    return _VARIABLE.sub(lambda m: variables.get(m["braced"] or m["plain"], ""), value)


def create_release(
    job: Mapping[str, Any], variables: Mapping[str, str], *, url: str, project: str | int, job_token: str
) -> dict[str, Any]:
    """Create the release `job`'s `release:` keyword describes, as the runner does after its script."""
    import gitlab

    keyword = job["release"]
    body = {name: expand(str(keyword[name]), variables) for name in FIELDS if name in keyword}
    client = gitlab.Gitlab(url, job_token=job_token, timeout=60)
    created = client.projects.get(project, lazy=True).releases.create(body)
    return dict(created.attributes)
