"""gitlab-ci-local for the pipeline tests, as a fixture: using it is what marks a test
`gitlab_ci_local` (tests/tiers.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.doubles.gitlab.fixtures import gitlab_double  # noqa: F401 - a fixture, used by name

ROOT = Path(__file__).resolve().parents[2]
PIPELINE = ROOT / "scripts" / "pipeline.sh"
TOOLS = ROOT / ".tools" / "node_modules" / ".bin"


class GitlabCiLocal:
    """gitlab-ci-local 4.64.1 (from `make system-deps`), output captured.

    Called, it runs scripts/pipeline.sh ARGS: acklab's own pipeline on a snapshot of the
    working tree. `in_project(directory, *args)` runs gitlab-ci-local itself in another
    project's repository (shell executor), as a project that includes acklab would.
    """

    def __call__(
        self, *args: str, timeout: float = 120, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(PIPELINE), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            env={**os.environ, **(env or {})},
        )

    def in_project(
        self, directory: Path, *args: str, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        path = f"{TOOLS}{os.pathsep}{os.environ.get('PATH', '')}"
        program = shutil.which("gitlab-ci-local", path=path)
        assert program, "gitlab-ci-local is missing: `make system-deps` installs it into .tools/"
        # Nothing of an enclosing pipeline or test run: its ACKLAB_VENV would let the user's jobs
        # borrow acklab instead of installing the release.
        drop = ("CI_", "GITLAB_", "GCL_", "PYTEST_", "ACKLAB_")
        env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
        return subprocess.run(
            [program, "--force-shell-executor", "--shell-executor-no-image", *args],
            cwd=directory,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )


Pipeline = GitlabCiLocal


@pytest.fixture
def gitlab_ci_local() -> GitlabCiLocal:
    """gitlab-ci-local: acklab's pipeline (call it) or another project's (`in_project`)."""
    return GitlabCiLocal()
