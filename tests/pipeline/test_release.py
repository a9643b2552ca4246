"""The release: on a tag naming the version, the wheel and the sdist go to the project's
package registry with the job token, then the catalog job's `release:` makes the tag a CI/CD
Catalog version — run through gitlab-ci-local against the GitLab double; then another
project includes the `run` component at that tag, names no version, and its job installs
acklab==TAG from the registry. A wrong tag or a missing token publishes nothing."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.doubles.gitlab import releases
from tests.doubles.gitlab.fixtures import JOB_TOKEN, PRIVATE_TOKEN, RunningDouble
from tests.doubles.gitlab.git_http import bare_repository
from tests.doubles.gitlab.merge_requests import add_repository
from tests.doubles.gitlab.server import create_app, serve
from tests.doubles.gitlab.state import GitLabDouble
from tests.pipeline.components import Context, catalog_version, resolve_context_in_place
from tests.pipeline.conftest import ROOT, Pipeline
from tests.pipeline.gitlab import gcl_job_dir, job_when, load_ci, resolve_job
from tests.pipeline.release_step import create_release
from tests.pipeline.test_include_elsewhere import shop_project

VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
RELEASE = ROOT / "scripts" / "release.sh"
PROJECT_ID = 1217  # the CI_PROJECT_ID gitlab-ci-local gives every job
TAG = "3.2.1"  # not pyproject.toml's version: the packages take the tag's


def release_script(tmp_path: Path, **variables: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "PYTHON": sys.executable, **variables}
    return subprocess.run(
        [str(RELEASE)], capture_output=True, text=True, env=env, timeout=60, check=False, cwd=tmp_path
    )


@pytest.mark.parametrize("tag", ["", f"v{VERSION}", f"release-{VERSION}", "1.2", "1.2.0-beta"])
def test_a_tag_that_is_not_a_release_version_builds_nothing(tmp_path: Path, tag: str) -> None:
    variables = {"CI_API_V4_URL": "http://127.0.0.1:9/api/v4", "CI_PROJECT_ID": "1", "CI_JOB_TOKEN": "t"}
    done = release_script(tmp_path, CI_COMMIT_TAG=tag, **variables)
    assert done.returncode == 2, done.stderr
    assert "tag X.Y.Z" in done.stderr
    assert not (ROOT / "dist").exists() or not list((ROOT / "dist").glob("acklab-*"))


@pytest.mark.parametrize("missing", ["CI_API_V4_URL", "CI_PROJECT_ID", "CI_JOB_TOKEN"])
def test_without_gitlabs_variables_nothing_is_built(tmp_path: Path, missing: str) -> None:
    variables = {"CI_API_V4_URL": "http://127.0.0.1:9/api/v4", "CI_PROJECT_ID": "1", "CI_JOB_TOKEN": "t"}
    del variables[missing]
    done = release_script(tmp_path, CI_COMMIT_TAG=VERSION, **variables)
    assert done.returncode == 2
    assert f"{missing} is not set" in done.stderr


def test_the_release_job_runs_on_tags_only_after_every_other_stage() -> None:
    ci = load_ci()
    release = resolve_job(ci, "release")
    assert ci["stages"][-1] == release["stage"] == "release"
    assert release.get("needs") is None, "needs: would let it start before the tests passed"
    assert job_when(release, {"CI_COMMIT_TAG": VERSION}) == "on_success"
    assert job_when(release, {"CI_COMMIT_BRANCH": "main", "CI_DEFAULT_BRANCH": "main"}) == "never"
    assert release["script"] == ["scripts/release.sh"]


@pytest.fixture
def gitlab_releases(tmp_path: Path) -> Iterator[RunningDouble]:
    """The GitLab double with the Releases API and git over HTTP (the catalog's side)."""
    state = GitLabDouble(private_tokens={PRIVATE_TOKEN}, job_tokens={JOB_TOKEN})
    state.git_root = str(tmp_path / "git")
    with serve(create_app(state, routers=[releases.router])) as url:
        yield RunningDouble(state=state, url=url)


def test_the_catalog_job_releases_the_tag_after_the_package() -> None:
    ci = load_ci()
    catalog = resolve_job(ci, "catalog")
    assert catalog["stage"] == "release"
    assert catalog["needs"] == [{"job": "release", "artifacts": False}]
    assert job_when(catalog, {"CI_COMMIT_TAG": VERSION}) == "on_success"
    assert job_when(catalog, {"CI_COMMIT_BRANCH": "main", "CI_DEFAULT_BRANCH": "main"}) == "never"
    assert catalog["release"]["tag_name"] == "$CI_COMMIT_TAG"


@pytest.mark.timeout(1200)
def test_a_release_tag_publishes_the_package_and_the_release_a_project_installs_by_tag(
    gitlab_releases: RunningDouble, gitlab_ci_local: Pipeline, tmp_path: Path
) -> None:
    double = gitlab_releases
    project = double.state.add_project("acklab/acklab", id=PROJECT_ID)
    workdir = tmp_path / "pipeline"
    done = gitlab_ci_local(
        "--workdir",
        str(workdir),
        "--tag",
        TAG,
        "--server",
        double.url,
        "--variable",
        f"CI_JOB_TOKEN={double.job_token}",
        "release",
        "catalog",
        timeout=800,
    )
    logs = {
        job: (workdir / ".gitlab-ci-local" / "output" / f"{gcl_job_dir(job)}.log").read_text(errors="replace")
        for job in ("release", "catalog")
        if (workdir / ".gitlab-ci-local" / "output" / f"{gcl_job_dir(job)}.log").exists()
    }
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:] + str(logs)[-4000:]

    dist = workdir / ".gitlab-ci-local" / "artifacts" / gcl_job_dir("release") / "dist"
    built = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in dist.iterdir()}
    assert set(built) == {f"acklab-{TAG}-py3-none-any.whl", f"acklab-{TAG}.tar.gz"}
    stored = {f.filename: (f.sha256, f.version, f.uploaded_by) for f in double.state.packages}
    assert stored == {name: (sha, TAG, "job") for name, sha in built.items()}
    uploads = [r for r in double.state.requests if r.method == "POST"]
    assert [(r.path, r.auth, r.status) for r in uploads] == [
        (f"/api/v4/projects/{PROJECT_ID}/packages/pypi", "job", 201)
    ] * 2
    assert all(double.job_token not in log for log in logs.values())
    assert f"acklab {TAG} is in the package registry" in logs["catalog"]
    assert tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"] == VERSION  # untouched

    # The runner's step for the catalog job's `release:` keyword (gitlab-ci-local skips it), on
    # the project as GitLab holds it: the tagged snapshot the pipeline ran on.
    add_repository(project, bare_repository(Path(double.state.git_root), "acklab/acklab", workdir))
    variables = {"CI_COMMIT_TAG": TAG, "CI_PROJECT_PATH": "acklab/acklab"}
    catalog = resolve_job(load_ci(workdir / ".gitlab-ci.yml"), "catalog")
    release = create_release(
        catalog, variables, url=double.url, project=PROJECT_ID, job_token=double.job_token
    )
    assert (release["tag_name"], release["name"]) == (TAG, f"acklab {TAG}")
    assert release["commit"]["id"] == git_out(workdir, "rev-parse", f"{TAG}^{{commit}}")
    assert releases.released(project) == [TAG]

    # A project includes run@TAG and names no version: it gets acklab==TAG.
    shop = shop_with_component(double, tmp_path / "shop", TAG)
    fetched = gitlab_ci_local.in_project(shop, "--list")
    assert fetched.returncode == 0, fetched.stdout[-3000:] + fetched.stderr[-2000:]
    host = double.url.split("://", 1)[1].split(":", 1)[0]
    cached = (
        shop / ".gitlab-ci-local" / "includes" / host / "acklab" / "acklab" / TAG / "templates" / "run.yml"
    )
    context = Context(name="run", reference=TAG, version=catalog_version(TAG, releases.released(project)))
    assert context.version == TAG  # the catalog knows the release the catalog job made
    resolve_context_in_place(cached, context)
    ran = gitlab_ci_local.in_project(shop, "--variable", f"CI_JOB_TOKEN={double.job_token}", timeout=600)
    output = shop / ".gitlab-ci-local" / "output" / f"{gcl_job_dir('webhooks: [1/1]')}.log"
    log = output.read_text(errors="replace") if output.exists() else "(no job log)"
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-2000:] + log[-4000:]
    assert f"acklab, version {TAG}" in log  # "$ACKLAB" --version: the release the tag names
    assert "reproduced: fixture:unsafe violates the invariant" in log
    simple = [r for r in double.state.requests if r.method == "GET" and "/packages/pypi/" in r.path]
    assert {r.auth for r in simple} == {"job"}
    assert "/api/v4/projects/acklab/acklab/packages/pypi/simple/acklab" in {
        r.path.rstrip("/") for r in simple
    }


def shop_with_component(double: RunningDouble, where: Path, tag: str) -> Path:
    """A service's repository that includes acklab's `run` component at `tag`, no version named."""
    ci = f"""\
include:
  - component: $CI_SERVER_FQDN/acklab/acklab/run@{tag}
    inputs:
      job_name: webhooks
      target: fixture:unsafe
      expect: fail
      trials: 1
      run_args: --experiment lost-ack
      acklab_project: acklab/acklab
      acklab_extras: fixture
"""
    return shop_project(double, where, ci)


def git_out(where: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(where), *args], check=True, capture_output=True, text=True, timeout=60
    ).stdout.strip()
