"""gitlab-ci-local for the pipeline tests, as a fixture: using it is what marks a test
`gitlab_ci_local` (tests/tiers.py)."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.doubles.gitlab.fixtures import gitlab_double  # noqa: F401 - a fixture, used by name

ROOT = Path(__file__).resolve().parents[2]
PIPELINE = ROOT / "scripts" / "pipeline.sh"

Pipeline = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def gitlab_ci_local() -> Pipeline:
    """`gitlab_ci_local(*args, timeout=120)`: scripts/pipeline.sh ARGS (gitlab-ci-local 4.64.1 on a
    snapshot of the working tree), its output captured. It comes from `make system-deps`."""

    def run(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(PIPELINE), *args], capture_output=True, text=True, timeout=timeout, check=False
        )

    return run
