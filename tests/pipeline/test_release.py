"""The release job: on a tag naming the version, the wheel and the sdist go to the project's
package registry with the job token — run through gitlab-ci-local against the GitLab
double, then installed back with pip; a wrong tag or a missing token publishes nothing."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from tests.doubles.gitlab.fixtures import RunningDouble
from tests.pipeline.conftest import ROOT, Pipeline
from tests.pipeline.gitlab import gcl_job_dir, job_when, load_ci, resolve_job

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


@pytest.mark.timeout(900)
def test_a_release_tag_publishes_wheel_and_sdist_that_pip_installs_back(
    gitlab_double: RunningDouble, gitlab_ci_local: Pipeline, tmp_path: Path
) -> None:
    gitlab_double.state.add_project("acklab/acklab", id=PROJECT_ID)
    workdir = tmp_path / "pipeline"
    done = gitlab_ci_local(
        "--workdir",
        str(workdir),
        "--tag",
        TAG,
        "--server",
        gitlab_double.url,
        "--variable",
        f"CI_JOB_TOKEN={gitlab_double.job_token}",
        "release",
        timeout=800,
    )
    log = (workdir / ".gitlab-ci-local" / "output" / f"{gcl_job_dir('release')}.log").read_text(
        errors="replace"
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:] + log[-4000:]

    dist = workdir / ".gitlab-ci-local" / "artifacts" / gcl_job_dir("release") / "dist"
    built = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in dist.iterdir()}
    assert set(built) == {f"acklab-{TAG}-py3-none-any.whl", f"acklab-{TAG}.tar.gz"}
    stored = {f.filename: (f.sha256, f.version, f.uploaded_by) for f in gitlab_double.state.packages}
    assert stored == {name: (sha, TAG, "job") for name, sha in built.items()}
    uploads = [r for r in gitlab_double.state.requests if r.method == "POST"]
    assert [(r.path, r.auth, r.status) for r in uploads] == [
        (f"/api/v4/projects/{PROJECT_ID}/packages/pypi", "job", 201)
    ] * 2
    assert gitlab_double.job_token not in log

    # What a project installing the release gets (the components' acklab_version): these bytes.
    host = gitlab_double.url.removeprefix("http://")
    index = f"http://gitlab-ci-token:{gitlab_double.job_token}@{host}/api/v4/projects/{PROJECT_ID}/packages/pypi/simple"
    env = {**os.environ, "PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    pip = [sys.executable, "-m", "pip", "download", "--no-deps", "-d", str(tmp_path / "got")]
    got = subprocess.run(
        [*pip, "--index-url", index, f"acklab=={TAG}"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert got.returncode == 0, got.stderr
    [wheel] = (tmp_path / "got").iterdir()
    assert hashlib.sha256(wheel.read_bytes()).hexdigest() == built[wheel.name]
    with zipfile.ZipFile(wheel) as archive:
        (metadata,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        assert f"\nVersion: {TAG}\n" in archive.read(metadata).decode()
    assert tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"] == VERSION  # untouched
