"""The GitLab double's PyPI package registry answers twine and pip as GitLab does: HTTP Basic
with a job token (user gitlab-ci-token), a deploy token or a personal access token, the
files stored as uploaded, and a simple index that pip installs from."""

from __future__ import annotations

import base64
import hashlib
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import httpx
import pytest

from tests.doubles.gitlab.fixtures import DEPLOY_READ, DEPLOY_WRITE, RunningDouble
from tests.doubles.gitlab.pypi import normalize

PROJECT = 1217


def tiny_wheel(where: Path, name: str = "tiny_pkg", version: str = "1.0") -> Path:
    """A valid, installable pure-Python wheel of one module (what twine and pip read)."""
    dist = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": f"VERSION = {version!r}\n",
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\nRequires-Python: >=3.11\n",
        f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: acklab-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(text.encode())}")
    files[f"{dist}/RECORD"] = "\n".join([*record, f"{dist}/RECORD,,"]) + "\n"
    wheel = where / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for member, text in files.items():
            archive.writestr(member, text)
    return wheel


def registry(double: RunningDouble, project: int = PROJECT) -> str:
    return f"{double.url}/api/v4/projects/{project}/packages/pypi"


def upload(double: RunningDouble, wheel: Path, auth: tuple[str, str] | None, **form: str) -> httpx.Response:
    data = {
        ":action": "file_upload",
        "protocol_version": "1",
        "name": "tiny_pkg",
        "version": "1.0",
        "filetype": "bdist_wheel",
        "sha256_digest": hashlib.sha256(wheel.read_bytes()).hexdigest(),
        "requires_python": ">=3.11",
        **form,
    }
    data = {k: v for k, v in data.items() if v != ""}
    return httpx.post(
        registry(double),
        data=data,
        files={"content": (wheel.name, wheel.read_bytes())},
        auth=auth,
        timeout=30,
    )


@pytest.fixture
def double(gitlab_double: RunningDouble) -> RunningDouble:
    gitlab_double.state.add_project("acme/acklab", id=PROJECT)
    return gitlab_double


def test_a_job_token_uploads_and_pip_reads_back_the_same_bytes(double: RunningDouble, tmp_path: Path) -> None:
    wheel = tiny_wheel(tmp_path)
    job = ("gitlab-ci-token", double.job_token)
    created = upload(double, wheel, job)
    assert (created.status_code, created.json()) == (201, {"message": "201 Created"})

    index = httpx.get(f"{registry(double)}/simple", auth=job)
    assert index.headers["content-type"].startswith("text/html")
    assert f'href="{registry(double)}/simple/tiny-pkg"' in index.text
    files = httpx.get(f"{registry(double)}/simple/Tiny.Pkg", auth=job)  # PEP 503 normalised
    sha = hashlib.sha256(wheel.read_bytes()).hexdigest()
    link = f"{registry(double)}/files/{sha}/{wheel.name}#sha256={sha}"
    assert f'href="{link}"' in files.text
    assert 'data-requires-python="&gt;=3.11"' in files.text
    assert httpx.get(link.split("#", maxsplit=1)[0], auth=job).content == wheel.read_bytes()

    host = double.url.removeprefix("http://")
    index_url = (
        f"http://gitlab-ci-token:{double.job_token}@{host}/api/v4/projects/{PROJECT}/packages/pypi/simple"
    )
    env = {**os.environ, "PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    pip_args = ["--index-url", index_url, "tiny-pkg==1.0"]
    done = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "-d", str(tmp_path / "got"), *pip_args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "got" / wheel.name).read_bytes() == wheel.read_bytes()
    assert double.job_token not in done.stdout + done.stderr  # pip redacts the password it was given
    assert {r.auth for r in double.state.requests} == {"job"}


def test_twine_uploads_with_a_job_token_and_a_second_upload_of_a_file_is_refused(
    double: RunningDouble, tmp_path: Path
) -> None:
    wheel = tiny_wheel(tmp_path)
    twine = [sys.executable, "-m", "twine", "upload", "--non-interactive", "--disable-progress-bar"]
    twine += ["--repository-url", registry(double), str(wheel)]
    env = {**os.environ, "TWINE_USERNAME": "gitlab-ci-token", "TWINE_PASSWORD": double.job_token}
    first = subprocess.run(twine, capture_output=True, text=True, env=env, timeout=120, check=False)
    assert first.returncode == 0, first.stdout + first.stderr
    [stored] = double.state.packages
    assert (normalize(stored.name), stored.version, stored.filename) == ("tiny-pkg", "1.0", wheel.name)
    assert stored.sha256 == hashlib.sha256(wheel.read_bytes()).hexdigest()
    assert stored.uploaded_by == "job"

    again = subprocess.run(twine, capture_output=True, text=True, env=env, timeout=120, check=False)
    assert again.returncode != 0
    assert "400 Bad Request" in " ".join((again.stdout + again.stderr).split())
    assert double.job_token not in again.stdout + again.stderr
    assert double.state.requests[-1].status == 400
    assert len(double.state.packages) == 1


@pytest.mark.parametrize(
    ("auth", "status"),
    [
        (None, 401),
        (("gitlab-ci-token", "not-a-job-token"), 401),
        (("someone", "not-a-token"), 401),
        (("deploy", DEPLOY_READ), 403),  # a deploy token that may only read
        (("gitlab+deploy-token-2", DEPLOY_WRITE), 201),
        (("any-name", "glpat-double-private-0123456789"), 201),  # a personal access token
    ],
    ids=[
        "anonymous",
        "bad-job-token",
        "unknown-token",
        "read-only-deploy-token",
        "deploy-token",
        "personal-token",
    ],
)
def test_uploads_follow_gitlabs_rules_for_each_kind_of_token(
    double: RunningDouble, tmp_path: Path, auth: tuple[str, str] | None, status: int
) -> None:
    response = upload(double, tiny_wheel(tmp_path), auth)
    assert response.status_code == status, response.text
    if status == 401:
        assert response.headers["www-authenticate"] == 'Basic realm="GitLab Packages Registry"'
        assert response.json() == {"message": "401 Unauthorized"}
    stored = 1 if status == 201 else 0
    assert len(double.state.packages) == stored


def test_a_job_token_is_taken_from_basic_auth_only(double: RunningDouble, tmp_path: Path) -> None:
    wheel = tiny_wheel(tmp_path)
    # Elsewhere in the API a JOB-TOKEN header is fine; GitLab's PyPI routes take Basic only.
    header = httpx.post(
        registry(double),
        data={"name": "tiny_pkg", "version": "1.0"},
        files={"content": (wheel.name, wheel.read_bytes())},
        headers={"JOB-TOKEN": double.job_token},
    )
    assert header.status_code == 401
    as_user = upload(double, wheel, ("deployer", double.job_token))  # a job token needs gitlab-ci-token
    assert as_user.status_code == 401
    read = httpx.get(f"{registry(double)}/simple", auth=("anyone", DEPLOY_READ))
    assert read.status_code == 200


def test_bad_uploads_are_refused_and_change_nothing(double: RunningDouble, tmp_path: Path) -> None:
    wheel = tiny_wheel(tmp_path)
    job = ("gitlab-ci-token", double.job_token)
    missing = upload(double, wheel, job, name="")
    assert (missing.status_code, missing.json()) == (400, {"error": "name is missing"})
    forged = upload(double, wheel, job, sha256_digest="0" * 64)
    assert forged.status_code == 400
    assert "sha256_digest does not match" in forged.json()["message"]
    assert upload(double, wheel, job).status_code == 201
    twice = upload(double, wheel, job)
    assert (twice.status_code, twice.json()) == (
        400,
        {"message": "400 Bad request - Validation failed: File name has already been taken"},
    )
    double.state.packages.clear()
    elsewhere = httpx.post(
        registry(double, 9999),
        data={"name": "x", "version": "1"},
        files={"content": ("x.whl", b"x")},
        auth=job,
    )
    assert (elsewhere.status_code, elsewhere.json()) == (404, {"message": "404 Project Not Found"})
    assert double.state.packages == []
    assert httpx.get(f"{registry(double)}/simple/tiny-pkg", auth=job).status_code == 404
