"""pytest fixtures for the GitLab double. Import them into a conftest.py::

from tests.doubles.gitlab.fixtures import gitlab_double  # noqa: F401
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tests.doubles.gitlab.server import create_app, serve
from tests.doubles.gitlab.state import GitLabDouble

PRIVATE_TOKEN = "glpat-double-private-0123456789"  # test tokens the double accepts
JOB_TOKEN = "glcbt-double-job-0123456789"


@dataclass
class RunningDouble:
    """A live double: its state (arrange it in the test) and its base URL."""

    state: GitLabDouble
    url: str
    private_token: str = PRIVATE_TOKEN
    job_token: str = JOB_TOKEN


@pytest.fixture
def gitlab_double() -> Iterator[RunningDouble]:
    """A GitLab double serving the CI routes on 127.0.0.1 for one test."""
    state = GitLabDouble(private_tokens={PRIVATE_TOKEN}, job_tokens={JOB_TOKEN})
    with serve(create_app(state)) as url:
        yield RunningDouble(state=state, url=url)
