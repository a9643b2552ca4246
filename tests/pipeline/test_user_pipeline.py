"""A user's pipeline, run by gitlab-ci-local as GitLab would: it includes acklab's `run` component at
a release tag (offline: gitlab-ci-local's include cache is filled from this checkout), the job
installs that release (no version named: the tag it was included at) from the acklab project's
package registry (the GitLab double's, holding
the wheel built here) into a virtualenv of its own and calls it by path, and the spec's
`command:` serves the user's service with the job's own `python` on a `{{port}}` the lab picks:
two shards, each attacking a service of its own.

The proof that `command:` runs the project's program: the service imports stripe and
starlette, which the job's own python has and acklab's fresh virtualenv (the core alone) has
not; a `python` resolved from acklab's virtualenv would fail to start (exit 4)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.doubles.gitlab.fixtures import RunningDouble
from tests.pipeline.components import Context, catalog_version, resolve_context_in_place
from tests.pipeline.conftest import ROOT, GitlabCiLocal
from tests.pipeline.gitlab import gcl_job_dir
from tests.pipeline.test_include_elsewhere import git
from tests.pipeline.test_package_registry import PROJECT, upload

VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
SECRET = "whsec_user_pipeline_stripe_secret_0123"

SPEC = """\
apiVersion: acklab/v1
kind: target
name: payments
endpoint: "http://127.0.0.1:{{port}}/stripe/webhook"
signing: {scheme: stripe, secret: env:STRIPE_WEBHOOK_SECRET}
command:
  argv: [python, -m, uvicorn, "shop.app:app", --host, 127.0.0.1, --port, "{{port}}"]
  cwd: ..
  env: {PAYMENTS_DB: "{{scratch}}/payments.db"}
event:
  id: "{{event_id}}"
  object: event
  type: payment_intent.succeeded
  created: "{{unix_time}}"
  data: {object: {id: "pi_{{event_id}}", object: payment_intent, amount: 1099, currency: usd}}
effects:
  sql: {url: "sqlite:///{{scratch}}/payments.db",
        count: "SELECT count(*) FROM payments WHERE intent = 'pi_' || :event_id"}
expect: {max_effects: 1, conflict_status: [409, 422]}
"""

CI = f"""\
include:
  - component: $CI_SERVER_FQDN/acme/acklab/run@{VERSION}
    inputs:
      job_name: webhooks
      target: acklab/payments.target.yaml
      shards: 2
      trials: 1
      run_args: --experiment lost-ack --experiment concurrent-duplicates
      setup:                           # the project's own environment: its venv, first on PATH
        - export PATH="PROJECT_BIN:$PATH"
        - echo "job TMPDIR=$TMPDIR"             # where acklab's install step makes its venv
      acklab_project: acme/acklab

webhooks:
  variables:
    STRIPE_WEBHOOK_SECRET: {SECRET}
"""


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """acklab's wheel, built from this checkout's files (as the release job builds it)."""
    source, out = tmp_path_factory.mktemp("source"), tmp_path_factory.mktemp("wheel")
    listed = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        check=True,
        capture_output=True,
    ).stdout.decode()
    for rel in filter(None, listed.split("\0")):
        if (ROOT / rel).is_file():
            (source / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, source / rel)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(out),
            str(source),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (built,) = out.glob("acklab-*.whl")
    return built


def user_project(where: Path, double: RunningDouble) -> Path:
    """The shop's repository: its service, its target spec, its pipeline; origin on the double."""
    (where / "shop").mkdir(parents=True)
    (where / "shop" / "__init__.py").write_text("")
    shutil.copy(ROOT / "tests" / "init" / "payments_shop.py", where / "shop" / "app.py")
    (where / "acklab").mkdir()
    (where / "acklab" / "payments.target.yaml").write_text(SPEC)
    # The project's virtualenv (here: this test's, which has the shop's dependencies).
    (where / ".gitlab-ci.yml").write_text(CI.replace("PROJECT_BIN", str(Path(sys.executable).parent)))
    git(where.parent, "init", "-q", "-b", "main", str(where))
    git(where, "add", "-A")
    git(where, "commit", "-q", "-m", "shop")
    git(where, "remote", "add", "origin", f"{double.url}/acme/shop.git")
    # Offline: the include cache holds the components of this checkout, at the release tag.
    host = double.url.split("://", 1)[1].split(":", 1)[0]
    cache = where / ".gitlab-ci-local" / "includes" / host / "acme" / "acklab" / VERSION / "templates"
    shutil.copytree(ROOT / "templates", cache)
    # As GitLab reads the file: a tag with no CI/CD Catalog release resolves to no version,
    # so the job installs the tag it was included at (gitlab-ci-local fills in no context).
    context = Context(name="run", reference=VERSION, version=catalog_version(VERSION, released=[]))
    resolve_context_in_place(cache / "run.yml", context)
    return where


@pytest.mark.timeout(900)
def test_a_user_pipeline_installs_the_release_and_each_shard_attacks_its_own_service(
    gitlab_double: RunningDouble,
    gitlab_ci_local: GitlabCiLocal,
    wheel: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    gitlab_double.state.add_project("acme/acklab", id=PROJECT)
    job = ("gitlab-ci-token", gitlab_double.job_token)
    created = upload(
        gitlab_double,
        wheel,
        job,
        name="acklab",
        version=VERSION,
        requires_python=">=3.11",
        filetype="bdist_wheel",
    )
    assert created.status_code == 201, created.text
    shop = user_project(tmp_path / "shop", gitlab_double)
    # The jobs' TMPDIR (the shell executor hands them ours): where each makes its virtualenv.
    jobs_tmp = tmp_path / "jobs-tmp"
    jobs_tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(jobs_tmp))

    done = gitlab_ci_local.in_project(
        shop, "--variable", f"CI_JOB_TOKEN={gitlab_double.job_token}", timeout=800
    )
    logs = {
        shard: (shop / ".gitlab-ci-local" / "output" / f"{gcl_job_dir(f'webhooks: [{shard}/2]')}.log")
        for shard in (1, 2)
    }
    shown = "".join(p.read_text(errors="replace")[-3000:] for p in logs.values() if p.exists())
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:] + shown

    # acklab came from the registry, by the job token, into a venv of its own, called by path.
    downloads = [r for r in gitlab_double.state.requests if r.method == "GET" and "/packages/pypi/" in r.path]
    assert downloads, "the jobs installed acklab from the acklab project's package registry"
    assert {r.auth for r in downloads} == {"job"}
    # ... and that venv, made in the job's TMPDIR (ours), went with the job's shell: a shell
    # executor keeps nothing of it.
    for log in logs.values():
        assert f"job TMPDIR={jobs_tmp}" in log.read_text(errors="replace")
    assert not list(jobs_tmp.glob("acklab-venv.*"))
    for log in logs.values():
        text = log.read_text(errors="replace")
        assert f"acklab, version {VERSION}" in text  # "$ACKLAB" --version
        assert gitlab_double.job_token not in text

    ports = set()
    for shard in (1, 2):
        out = shop / ".gitlab-ci-local" / "artifacts" / gcl_job_dir(f"webhooks: [{shard}/2]") / "out"
        run = json.loads((out / f"webhooks-{shard}-2.run.json").read_text())  # out/$CI_JOB_NAME_SLUG
        assert run["verdict"] == "pass", run
        bundle = Path(run["bundle"])
        bundle = (
            bundle
            if bundle.is_absolute() and bundle.exists()
            else out / Path(run["bundle"]).relative_to("out")
        )
        incidents = [json.loads(p.read_text()) for p in (bundle / "incidents").glob("*.json")]
        assert incidents
        endpoints = {i["target"]["endpoint"] for i in incidents}
        (endpoint,) = endpoints
        ports.add(endpoint.split(":")[2].split("/")[0])
        # The service ran under the job's python (stripe imported), started by this shard's lab.
        assert "Uvicorn running on http://127.0.0.1:" in (bundle / "service.log").read_text()
    assert len(ports) == 2, f"each shard served its own service on its own port: {ports}"
