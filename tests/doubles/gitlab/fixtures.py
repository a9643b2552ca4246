"""pytest fixtures for the GitLab double. Import them into a conftest.py::

from tests.doubles.gitlab.fixtures import gitlab_double  # noqa: F401
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tests.doubles.gitlab.server import create_app, serve
from tests.doubles.gitlab.state import DeployToken, GitLabDouble

PRIVATE_TOKEN = "glpat-double-private-0123456789"  # test tokens the double accepts
JOB_TOKEN = "glcbt-double-job-0123456789"
OAUTH_TOKEN = "double-oauth-0123456789abcdef"  # a Duo flow's GITLAB_TOKEN: Bearer only
DEPLOY_READ = "gldt-double-read-0123456789"  # deploy tokens: read, and read + write packages
DEPLOY_WRITE = "gldt-double-write-0123456789"
DEPLOY_TOKENS = {
    DEPLOY_READ: DeployToken("gitlab+deploy-token-1", frozenset({"read_package_registry"})),
    DEPLOY_WRITE: DeployToken(
        "gitlab+deploy-token-2", frozenset({"read_package_registry", "write_package_registry"})
    ),
}


@dataclass
class RunningDouble:
    """A live double: its state (arrange it in the test) and its base URL."""

    state: GitLabDouble
    url: str
    private_token: str = PRIVATE_TOKEN
    job_token: str = JOB_TOKEN


@pytest.fixture
def gitlab_double() -> Iterator[RunningDouble]:
    """A GitLab double serving the CI and PyPI registry routes on 127.0.0.1 for one test."""
    state = GitLabDouble(
        private_tokens={PRIVATE_TOKEN}, job_tokens={JOB_TOKEN}, deploy_tokens=dict(DEPLOY_TOKENS)
    )
    with serve(create_app(state)) as url:
        yield RunningDouble(state=state, url=url)
