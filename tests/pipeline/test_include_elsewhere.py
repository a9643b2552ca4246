"""Another project includes acklab at a release tag, as docs/ci.md shows — the components
(`include: component:`) and the templates (`include: project:`) — and gitlab-ci-local
fetches them from the GitLab double over git, resolves the inputs and builds the jobs."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest

from tests.doubles.gitlab.fixtures import RunningDouble
from tests.doubles.gitlab.git_http import bare_repository
from tests.pipeline.conftest import ROOT, GitlabCiLocal

VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
IDENTITY = ["-c", "user.name=acklab", "-c", "user.email=acklab@localhost"]


def git(where: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(where), *IDENTITY, *args], check=True, capture_output=True, timeout=60)


def readme_example(marker: str) -> str:
    """The pipeline with `marker` from docs/ci.md: the whole pipeline with the components, or the
    one with `include: project:`."""
    doc = (ROOT / "docs" / "ci.md").read_text(encoding="utf-8")
    found = []
    for heading in (
        "## The whole pipeline: shards, evidence and Pages",
        "## With `include: project:` instead",
    ):
        section = doc.split(heading, 1)[1].split("\n## ", 1)[0]
        found += [b for b in re.findall(r"```yaml\n(.*?)```", section, flags=re.S) if marker in b]
    (example,) = found
    return example


@pytest.fixture
def acklab_released(gitlab_double: RunningDouble, tmp_path: Path) -> RunningDouble:
    """acme/acklab on the double, its components and templates tagged as this version."""
    source = tmp_path / "acklab"
    for folder in ("templates", "ci"):
        shutil.copytree(ROOT / folder, source / folder)
    git(source.parent, "init", "-q", "-b", "main", str(source))
    git(source, "add", "-A")
    git(source, "commit", "-q", "-m", f"acklab {VERSION}")
    git(source, "tag", VERSION)
    gitlab_double.state.git_root = str(tmp_path / "git")
    bare_repository(tmp_path / "git", "acme/acklab", source)
    return gitlab_double


def shop_project(double: RunningDouble, where: Path, ci: str) -> Path:
    """A service's repository whose pipeline is `ci`, its origin the double (acme/shop)."""
    where.mkdir()
    (where / ".gitlab-ci.yml").write_text(ci, encoding="utf-8")
    git(where, "init", "-q", "-b", "main")
    git(where, "add", "-A")
    git(where, "commit", "-q", "-m", "shop")
    git(where, "remote", "add", "origin", f"{double.url}/acme/shop.git")
    git(where, "update-ref", "refs/remotes/origin/main", "HEAD")
    git(where, "symbolic-ref", "refs/remotes/origin/HEAD", "refs/remotes/origin/main")
    return where


def jobs_of(done: subprocess.CompletedProcess[str]) -> dict[str, dict[str, Any]]:
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    listed = json.loads(done.stdout[done.stdout.index("[") :])
    return {job["name"]: job for job in listed}


def preview(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    import yaml

    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return yaml.safe_load(done.stdout[done.stdout.index("---") :] if "---" in done.stdout else done.stdout)


def test_a_project_includes_the_components_at_a_release_tag(
    acklab_released: RunningDouble, gitlab_ci_local: GitlabCiLocal, tmp_path: Path
) -> None:
    shop = shop_project(acklab_released, tmp_path / "shop", readme_example("component:"))
    jobs = jobs_of(gitlab_ci_local.in_project(shop, "--list-json"))
    assert {name: job["when"] for name, job in jobs.items()} == {
        "webhooks: [1/2]": "on_success",
        "webhooks: [2/2]": "on_success",
        "acklab-evidence": "always",
        "pages": "on_success",  # the default branch
    }
    assert [n["job"] for n in jobs["acklab-evidence"]["needs"]] == ["webhooks"]
    assert [n["job"] for n in jobs["pages"]["needs"]] == ["acklab-evidence"]

    config = preview(gitlab_ci_local.in_project(shop, "--preview"))
    webhooks = config["webhooks"]
    assert webhooks["variables"]["ACKLAB_TARGET"] == "acklab/shop.target.yaml"
    assert webhooks["variables"]["ACKLAB_PROJECT"] == "acme/acklab"
    # No version named: the job installs the component's own release, which GitLab tells it
    # in ACKLAB_COMPONENT; gitlab-ci-local (4.64.1) leaves the component context unfilled.
    assert webhooks["variables"]["ACKLAB_VERSION"] == ""
    assert webhooks["variables"]["ACKLAB_COMPONENT"] == "$[[ component.version ]]@$[[ component.reference ]]"
    assert webhooks["variables"]["SHOP_WEBHOOK_SECRET"] == "$SHOP_WEBHOOK_SECRET_CI"  # the project's own
    assert webhooks["before_script"][0] == "pip install -e ."  # the project's, on the job's PATH
    assert not any(
        line.lstrip().startswith("uvicorn") for line in webhooks["before_script"]
    )  # command: serves it
    assert webhooks["parallel"] == 2
    fetched = {r.path for r in acklab_released.state.requests}
    assert "/acme/acklab.git/git-upload-pack" in fetched, "the components were cloned from acme/acklab"
    assert all(path.startswith("/acme/acklab.git/") for path in fetched), fetched


def test_a_project_includes_the_templates_by_project_at_a_release_tag(
    acklab_released: RunningDouble, gitlab_ci_local: GitlabCiLocal, tmp_path: Path
) -> None:
    shop = shop_project(acklab_released, tmp_path / "shop", readme_example("- project:"))
    jobs = jobs_of(gitlab_ci_local.in_project(shop, "--list-json"))
    assert {name: job["when"] for name, job in jobs.items()} == {
        "webhooks: [1/2]": "on_success",
        "webhooks: [2/2]": "on_success",
        "webhooks-evidence": "always",
        "pages": "on_success",
    }
    config = preview(gitlab_ci_local.in_project(shop, "--preview"))
    assert '"${ACKLAB:-acklab}" run --target' in "\n".join(config["webhooks"]["script"])
    assert (
        config["webhooks"]["before_script"][-1] == '"$ACKLAB" --version'
    )  # !reference [.acklab, before_script]


def test_a_tag_that_does_not_exist_is_named(
    acklab_released: RunningDouble, gitlab_ci_local: GitlabCiLocal, tmp_path: Path
) -> None:
    ci = readme_example("component:").replace(f"@{VERSION}", "@9.9.9")
    shop = shop_project(acklab_released, tmp_path / "shop", ci)
    done = gitlab_ci_local.in_project(shop, "--list-json")
    assert done.returncode != 0
    assert "Component include could not be fetched" in done.stdout + done.stderr
