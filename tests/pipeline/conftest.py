"""gitlab-ci-local for the pipeline tests, as a fixture: using it is what marks a test
`gitlab_ci_local` (tests/tiers.py)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.doubles.gitlab.fixtures import gitlab_double  # noqa: F401 - a fixture, used by name

ROOT = Path(__file__).resolve().parents[2]
PIPELINE = ROOT / "scripts" / "pipeline.sh"
TOOLS = ROOT / ".tools" / "node_modules" / ".bin"
COMPONENT = re.compile(r"component:\s*['\"]?[^/\s]+/(?P<project>\S+)/[^/@\s]+@(?P<ref>[^\s'\"]+)")


def prepare_component_cache(directory: Path) -> None:
    """Create the `templates/` directory gitlab-ci-local copies each component into, ahead.

    gitlab-ci-local 4.64.1 fetches a project's components concurrently, each finishing with
    `cp -r <clone>/templates <cache>/<project>/<ref>`; two of them creating `templates/` at once
    fail one include with "File exists" (seen once in CI with three components of one release).
    Into an existing directory `cp -r` merges, so every fetch still happens, without the race.
    """
    ci = directory / ".gitlab-ci.yml"
    if not ci.is_file():
        return
    origin = subprocess.run(
        ["git", "remote", "get-url", "origin"], cwd=directory, capture_output=True, text=True, check=False
    ).stdout.strip()
    host = urlsplit(origin).hostname
    if not host:
        return
    for found in COMPONENT.finditer(ci.read_text()):
        cache = directory / ".gitlab-ci-local" / "includes" / host / found["project"] / found["ref"]
        (cache / "templates").mkdir(parents=True, exist_ok=True)


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
        prepare_component_cache(directory)
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
