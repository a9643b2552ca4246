"""`evidence pull` sends the GitLab token to GitLab only, and never writes a credential.

GitLab serves artifacts from object storage through a redirect to another host; requests
keeps custom headers (PRIVATE-TOKEN, JOB-TOKEN) across such a redirect unless told not to.
A ``GITLAB_URL`` with ``user:password@`` is used without them and recorded without them.
"""

from __future__ import annotations

import json

import pytest

from tests.doubles.gitlab.object_storage import serve_storage
from tests.evidence import test_pull
from tests.evidence.test_pull import all_bytes

# The pull tests' fixtures: a pipeline with two bundles in its artifacts, GITLAB_URL/GITLAB_TOKEN set.
pipeline, env = test_pull.pipeline, test_pull.env

TOKEN_HEADERS = {"private-token", "job-token", "authorization"}


@pytest.mark.parametrize("variable", ["GITLAB_TOKEN", "CI_JOB_TOKEN"])
def test_the_token_does_not_follow_the_redirect_to_object_storage(
    tmp_path,
    gitlab_double,
    pipeline,
    env,
    acklab,
    variable,
):
    _, pipe = pipeline
    if variable == "CI_JOB_TOKEN":
        env.delenv("GITLAB_TOKEN")
        env.setenv("CI_JOB_TOKEN", gitlab_double.job_token)
    with serve_storage(gitlab_double.state) as storage:
        assert not storage.startswith("http://127.0.0.1")  # another host than GITLAB_URL's
        code, stdout, stderr = acklab(
            "evidence",
            "pull",
            "--project",
            "acme/shop",
            "--pipeline",
            pipe.id,
            "--out",
            tmp_path / "o",
            "--json",
        )
    assert code == 0, stderr
    assert len(json.loads(stdout)) == 2
    seen = gitlab_double.state.storage_requests
    assert len(seen) == 2  # both archives came from object storage
    assert all(TOKEN_HEADERS.isdisjoint(headers) for headers in seen), seen
    downloads = [r for r in gitlab_double.state.requests if r.path.endswith("/artifacts")]
    assert downloads
    assert all(r.auth in ("private", "job") for r in downloads)
    assert all(r.status == 302 for r in downloads)


def test_credentials_in_gitlab_url_are_never_sent_printed_or_written(
    tmp_path,
    gitlab_double,
    pipeline,
    env,
    acklab,
):
    _, pipe = pipeline
    password = "glpat-in-the-url-0123456789"
    with_userinfo = gitlab_double.url.replace("http://", f"http://oauth2:{password}@")
    env.setenv("GITLAB_URL", with_userinfo)
    out = tmp_path / "o"
    code, stdout, stderr = acklab(
        "evidence", "pull", "--project", "acme/shop", "--pipeline", pipe.id, "--out", out
    )
    assert code == 0, stderr
    assert "user:password@ is ignored" in stderr
    assert password not in stdout + stderr
    assert password.encode() not in all_bytes(out)
    for manifest in out.rglob("manifest.json"):
        assert json.loads(manifest.read_text())["pulled_from"]["gitlab_url"] == gitlab_double.url
    assert {r.auth for r in gitlab_double.state.requests} == {"private"}  # the token, not basic auth


def test_credentials_in_gitlab_url_without_a_token_variable_are_refused(
    tmp_path,
    gitlab_double,
    pipeline,
    env,
    acklab,
):
    _, pipe = pipeline
    env.delenv("GITLAB_TOKEN")
    env.setenv(
        "GITLAB_URL", gitlab_double.url.replace("http://", "http://oauth2:glpat-in-the-url-0123456789@")
    )
    code, stdout, stderr = acklab(
        "evidence", "pull", "--project", "acme/shop", "--pipeline", pipe.id, "--out", tmp_path / "o"
    )
    assert code == 2
    assert "put the token in GITLAB_TOKEN" in stderr
    assert f"GITLAB_URL={gitlab_double.url}" in stderr
    assert "glpat-in-the-url" not in stdout + stderr
    assert not (tmp_path / "o").exists()
    assert gitlab_double.state.requests == []
