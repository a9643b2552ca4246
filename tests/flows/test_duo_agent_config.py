""".gitlab/duo/agent-config.yml: the image and setup GitLab runs the Duo flow with. Its keys are
GitLab's, its image has Python, and its setup installs this version's release from the
project's package registry as the components do — run here against the GitLab double's
registry with the wheel built from this checkout."""

from __future__ import annotations

import os
import re
import subprocess
import tomllib
from pathlib import Path

import pytest
import yaml

from tests.doubles.gitlab.fixtures import (
    RunningDouble,
    gitlab_double,  # noqa: F401 - a fixture, used by name
)
from tests.flows.conftest import ROOT
from tests.pipeline.test_package_registry import upload
from tests.pipeline.test_user_pipeline import wheel  # noqa: F401 - a fixture, used by name

CONFIG = ROOT / ".gitlab" / "duo" / "agent-config.yml"
DOC = yaml.safe_load(CONFIG.read_text(encoding="utf-8"))
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
# The keys GitLab reads (user/duo_agent_platform/flows/execution/agent-config-yaml).
KEYS = {"image", "setup_script", "network_policy", "cache", "id_tokens"}
# What a flow's job has of the variables the setup may use (execution-variables: no
# CI_API_V4_URL, CI_SERVER_URL or custom variables), and the two that only move it in tests.
AVAILABLE = {"GITLAB_BASE_URL", "CI_JOB_TOKEN", "CI_PROJECT_ID", "ACKLAB_HOME", "ACKLAB_BIN"}
PROJECT = 1217


def setup() -> str:
    script = DOC["setup_script"]
    return "\n".join(script) if isinstance(script, list) else str(script)


def test_it_uses_gitlabs_keys_and_an_image_with_python() -> None:
    assert set(DOC) <= KEYS
    assert re.fullmatch(r"python:3\.1[1-9](\.\d+)?", DOC["image"])  # the full image: git included


def test_the_setup_installs_this_release_with_what_a_flow_has() -> None:
    script = setup()
    assert set(re.findall(r"\$\{?([A-Z][A-Z0-9_]*)", script)) <= AVAILABLE
    assert re.findall(r"acklab(?:\[[a-z,]+\])?==([\w.]+)", script) == [VERSION, VERSION]
    assert "--no-deps --index-url" in script  # acklab alone from the registry, as the components do
    assert "/packages/pypi/simple" in script


@pytest.mark.slow
def test_the_setup_installs_the_release_from_the_projects_registry(
    gitlab_double: RunningDouble,  # noqa: F811 - the fixture
    wheel: Path,  # noqa: F811 - the fixture
    tmp_path: Path,
) -> None:
    gitlab_double.state.add_project("acme/acklab", id=PROJECT)
    created = upload(
        gitlab_double,
        wheel,
        ("gitlab-ci-token", gitlab_double.job_token),
        name="acklab",
        version=VERSION,
        requires_python=">=3.11",
        filetype="bdist_wheel",
    )
    assert created.status_code == 201, created.text
    (tmp_path / "bin").mkdir()
    env = {
        **{k: v for k, v in os.environ.items() if k.startswith("PIP_") or k in ("PATH", "LANG")},
        "HOME": str(tmp_path),
        "GITLAB_BASE_URL": gitlab_double.url,
        "CI_JOB_TOKEN": gitlab_double.job_token,
        "CI_PROJECT_ID": str(PROJECT),
        "ACKLAB_HOME": str(tmp_path / "acklab"),
        "ACKLAB_BIN": str(tmp_path / "bin"),
    }
    done = subprocess.run(
        ["sh", "-c", setup()], env=env, capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert f"acklab, version {VERSION}" in done.stdout
    assert (tmp_path / "bin" / "acklab").resolve() == tmp_path / "acklab" / "bin" / "acklab"
    fetched = [r for r in gitlab_double.state.requests if "/packages/pypi/files/" in r.path]
    assert [(r.auth, r.status) for r in fetched] == [("job", 200)]
    assert gitlab_double.job_token not in done.stdout + done.stderr
