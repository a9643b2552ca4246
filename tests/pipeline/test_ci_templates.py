"""The job templates' scripts, run as a GitLab runner runs them (bash, `set -eo pipefail`),
against a stand-in `acklab` whose exit code each test chooses. This pins the one piece of
logic the templates carry: which `acklab run` outcome makes the job pass."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.pipeline.gitlab import ROOT, load_yaml, resolve_job

TEMPLATES = load_yaml(ROOT / "ci" / "acklab.gitlab-ci.yml")

# Records its arguments, writes a bundle with a JUnit report like `acklab run` does, prints
# the --json object, and exits with FAKE_RC.
FAKE_ACKLAB = r"""#!/usr/bin/env bash
printf '%s\n' "$*" >> "$FAKE_LOG"
if [ "$1" = run ]; then
  out=""; prev=""
  for arg in "$@"; do [ "$prev" = --out ] && out=$arg; prev=$arg; done
  mkdir -p "$out/run-1/reports"
  echo '<testsuites/>' > "$out/run-1/reports/junit.xml"
  printf '{"verdict": "x", "bundle": "%s"}\n' "$out/run-1"
fi
if [ "$1 $2" = "evidence pull" ]; then exit "${FAKE_PULL_RC:-0}"; fi
exit "${FAKE_RC:-0}"
"""


def run_template(
    tmp_path: Path, template: str, variables: dict[str, str], rc: int = 0
) -> tuple[int, list[str]]:
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    fake = bindir / "acklab"
    fake.write_text(FAKE_ACKLAB, encoding="utf-8")
    fake.chmod(0o755)
    log = tmp_path / "calls.log"
    job = resolve_job(TEMPLATES, template)
    script = "set -eo pipefail\n" + "\n".join(job["script"]) + "\n"
    env = {
        "PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}",
        "HOME": str(tmp_path),
        "FAKE_LOG": str(log),
        "FAKE_RC": str(rc),
        "CI_JOB_NAME_SLUG": "webhooks",
        **{k: str(v) for k, v in job.get("variables", {}).items()},
        **variables,
    }
    work = tmp_path / "job"
    work.mkdir(exist_ok=True)
    done = subprocess.run(
        ["bash", "-c", script], check=False, cwd=work, env=env, capture_output=True, text=True, timeout=60
    )
    calls = log.read_text(encoding="utf-8").splitlines() if log.exists() else []
    return done.returncode, calls


@pytest.mark.parametrize(("acklab_rc", "job_rc"), [(0, 0), (1, 1), (3, 3), (4, 4), (7, 7)])
def test_expect_pass_passes_the_verdict_through(tmp_path: Path, acklab_rc: int, job_rc: int) -> None:
    rc, _ = run_template(tmp_path, ".acklab-run", {"ACKLAB_TARGET": "fixture:live"}, acklab_rc)
    assert rc == job_rc
    # The JUnit verdicts reach the MR widget whether the handler passed or failed.
    if acklab_rc in (0, 1):
        assert (tmp_path / "job" / "reports" / "acklab-webhooks.xml").is_file()


@pytest.mark.parametrize(("acklab_rc", "job_rc"), [(1, 0), (0, 1), (2, 2), (4, 4), (6, 6)])
def test_expect_fail_passes_only_when_the_violation_is_reproduced(
    tmp_path: Path, acklab_rc: int, job_rc: int
) -> None:
    variables = {"ACKLAB_TARGET": "fixture:unsafe", "ACKLAB_EXPECT": "fail"}
    rc, _ = run_template(tmp_path, ".acklab-run", variables, acklab_rc)
    assert rc == job_rc
    # An expected failure is not a failing test: nothing for the MR test widget.
    assert not list((tmp_path / "job" / "reports").glob("*.xml"))


def test_the_run_writes_its_evidence_and_json_per_job(tmp_path: Path) -> None:
    _, calls = run_template(
        tmp_path, ".acklab-run", {"ACKLAB_TARGET": "t.yaml", "ACKLAB_RUN_ARGS": "--trials 1 --allow-remote"}
    )
    assert calls == ["run --target t.yaml --trials 1 --allow-remote --out out/webhooks --json"]
    record = json.loads((tmp_path / "job" / "out" / "webhooks.run.json").read_text(encoding="utf-8"))
    assert record["bundle"] == "out/webhooks/run-1"


@pytest.mark.parametrize(
    ("index", "total", "shard"), [("1", "1", None), ("1", "3", "1/3"), ("3", "3", "3/3")]
)
def test_parallel_jobs_run_their_shard(tmp_path: Path, index: str, total: str, shard: str | None) -> None:
    variables = {
        "ACKLAB_TARGET": "fixture:live",
        "CI_NODE_INDEX": index,
        "CI_NODE_TOTAL": total,
        "CI_PIPELINE_ID": "4242",
    }
    rc, calls = run_template(tmp_path, ".acklab-run", variables)
    assert rc == 0
    assert ("--shard=" in calls[0]) is (shard is not None)
    if shard:
        # the shards of one pipeline share the seed, so they cut one plan
        assert f"--shard={shard} --seed=4242 " in calls[0]
    else:
        # an unsharded job cuts its plan from the same seed: the pipeline's targets compare
        assert calls[0] == "run --target fixture:live --seed=4242 --out out/webhooks --json"


def test_every_lab_job_of_a_pipeline_gets_the_same_seed(tmp_path: Path) -> None:
    seeds = set()
    for n, (target, extra) in enumerate(
        (
            ("fixture:unsafe", {"ACKLAB_EXPECT": "fail"}),
            ("fixture:live", {"CI_NODE_INDEX": "2", "CI_NODE_TOTAL": "2"}),
        )
    ):
        work = tmp_path / str(n)
        work.mkdir()
        _, calls = run_template(
            work, ".acklab-run", {"ACKLAB_TARGET": target, "CI_PIPELINE_ID": "77", **extra}, 1
        )
        seeds |= set(re.findall(r"--seed=(\S+)", calls[0]))
    assert seeds == {"77"}


def test_a_chosen_seed_wins_over_the_pipeline_id(tmp_path: Path) -> None:
    variables = {"ACKLAB_TARGET": "t.yaml", "CI_NODE_INDEX": "2", "CI_NODE_TOTAL": "2", "CI_PIPELINE_ID": "1"}
    _, calls = run_template(tmp_path, ".acklab-run", {**variables, "ACKLAB_SEED": "99"})
    assert "--shard=2/2 --seed=99 " in calls[0]
    _, calls = run_template(tmp_path, ".acklab-run", {"ACKLAB_TARGET": "t.yaml", "ACKLAB_SEED": "99"})
    assert "--seed=99 " in calls[-1]


def test_a_seed_given_in_the_run_arguments_comes_last_and_wins(tmp_path: Path) -> None:
    variables = {"ACKLAB_TARGET": "t.yaml", "CI_PIPELINE_ID": "5", "ACKLAB_RUN_ARGS": "--seed 3"}
    _, calls = run_template(tmp_path, ".acklab-run", variables)
    assert calls == [
        "run --target t.yaml --seed=5 --seed 3 --out out/webhooks --json"
    ]  # click keeps the last


@pytest.mark.parametrize(
    "variables",
    [{}, {"ACKLAB_TARGET": "fixture:live", "ACKLAB_EXPECT": "maybe"}],
    ids=["no-target", "bad-expect"],
)
def test_run_refuses_a_misconfigured_job(tmp_path: Path, variables: dict[str, str]) -> None:
    rc, _ = run_template(tmp_path, ".acklab-run", variables)
    assert rc == 2


def test_evidence_merges_the_shards_and_verifies_everything(tmp_path: Path) -> None:
    for shard in ("webhooks-1-2", "webhooks-2-2", "unsafe"):
        (tmp_path / "job" / "out" / shard).mkdir(parents=True)
    (tmp_path / "job" / "out" / "webhooks-1-2.run.json").write_text("{}", encoding="utf-8")
    rc, calls = run_template(tmp_path, ".acklab-evidence", {"ACKLAB_SHARDS": "out/webhooks-*/"})
    assert rc == 0
    assert calls == [
        "evidence merge out/webhooks-1-2/ out/webhooks-2-2/ --out out/merged",
        "evidence verify out",
    ]
    left = sorted(p.name for p in (tmp_path / "job" / "out").iterdir())
    assert left == ["unsafe", "webhooks-1-2.run.json"]


def test_evidence_stops_when_no_shard_arrived(tmp_path: Path) -> None:
    rc, calls = run_template(tmp_path, ".acklab-evidence", {"ACKLAB_SHARDS": "out/webhooks-*/"})
    assert rc == 3
    assert calls == []


def test_evidence_stops_when_the_merge_fails(tmp_path: Path) -> None:
    (tmp_path / "job" / "out" / "webhooks-1-2").mkdir(parents=True)
    rc, calls = run_template(tmp_path, ".acklab-evidence", {"ACKLAB_SHARDS": "out/webhooks-*/"}, rc=7)
    assert rc == 7
    assert len(calls) == 1
    assert (tmp_path / "job" / "out" / "webhooks-1-2").is_dir(), "a refused merge keeps its inputs"


PAGES_CI = {"CI_PROJECT_ID": "42", "CI_DEFAULT_BRANCH": "main", "CI_PIPELINE_ID": "77"}


def test_pages_pulls_the_last_pipelines_of_the_default_branch_then_builds(tmp_path: Path) -> None:
    rc, calls = run_template(tmp_path, ".acklab-pages", PAGES_CI)
    assert rc == 0
    assert calls == [
        "evidence pull --project 42 --ref main --last 20 --exclude 77 --out out/history",
        "pages --evidence out --out public",
    ]


def test_pages_history_is_configurable(tmp_path: Path) -> None:
    _, calls = run_template(
        tmp_path, ".acklab-pages", {**PAGES_CI, "ACKLAB_HISTORY": "5", "ACKLAB_HISTORY_JOB": "evidence"}
    )
    assert (
        calls[0]
        == "evidence pull --project 42 --ref main --last 5 --exclude 77 --job evidence --out out/history"
    )
    (tmp_path / "none").mkdir()
    _, calls = run_template(tmp_path / "none", ".acklab-pages", {**PAGES_CI, "ACKLAB_HISTORY": "0"})
    assert calls == ["pages --evidence out --out public"]


@pytest.mark.parametrize("pull_rc", [4, 7])
def test_pages_publishes_what_verified_when_the_history_pull_fails(tmp_path: Path, pull_rc: int) -> None:
    rc, calls = run_template(tmp_path, ".acklab-pages", {**PAGES_CI, "FAKE_PULL_RC": str(pull_rc)})
    assert rc == 0
    assert calls[-1] == "pages --evidence out --out public"


def test_pages_refuses_a_history_that_is_not_a_number(tmp_path: Path) -> None:
    rc, calls = run_template(tmp_path, ".acklab-pages", {**PAGES_CI, "ACKLAB_HISTORY": "twenty"})
    assert rc == 2
    assert calls == []


# `python3 -m venv DIR` makes DIR/bin/python, which records each `-m pip install` it is given.
FAKE_PYTHON = r"""#!/usr/bin/env bash
if [ "$1 $2" = "-m venv" ]; then
  mkdir -p "$3/bin"
  printf '#!/usr/bin/env bash\nprintf "%%s\\n" "$*" >> "$FAKE_LOG"\n' > "$3/bin/python"
  chmod +x "$3/bin/python"
fi
"""


def install(tmp_path: Path, variables: dict[str, str], then: str = "") -> tuple[int, list[str], str]:
    """The templates' install step (.acklab before_script, the components' too), with a stand-in
    python3, then the shell lines `then` in the same shell (as a job's script:); returns its exit
    code, the pip commands it ran and its stderr."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    (bindir / "python3").write_text(FAKE_PYTHON, encoding="utf-8")
    (bindir / "python3").chmod(0o755)
    log = tmp_path / "pip.log"
    script = "set -eo pipefail\n" + TEMPLATES[".acklab"]["before_script"][0] + "\n" + then
    env = {
        "PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}",
        "HOME": str(tmp_path),
        "TMPDIR": str(tmp_path),
        "FAKE_LOG": str(log),
        "CI_API_V4_URL": "https://gitlab.example.com/api/v4",
        "CI_JOB_TOKEN": "job-token-1",
        "ACKLAB_PROJECT": "acme/acklab",
        **variables,
    }
    done = subprocess.run(
        ["bash", "-c", script], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    pips = log.read_text(encoding="utf-8").splitlines() if log.exists() else []
    return done.returncode, pips, done.stderr


@pytest.mark.parametrize(
    ("variables", "version"),
    [
        ({"ACKLAB_COMPONENT": "1.4.0@1.4.0"}, "1.4.0"),  # a catalog release
        ({"ACKLAB_COMPONENT": "1.4.2@1"}, "1.4.2"),  # a partial version GitLab resolved
        ({"ACKLAB_COMPONENT": "@1.4.0rc1"}, "1.4.0rc1"),  # a tag outside the catalog
        ({"ACKLAB_COMPONENT": "1.4.0@1.4.0", "ACKLAB_VERSION": "1.3.0"}, "1.3.0"),  # named wins
        ({"ACKLAB_VERSION": "1.3.0"}, "1.3.0"),  # include: project: names it
    ],
    ids=["catalog", "partial", "plain-tag", "named", "project-include"],
)
def test_the_job_installs_the_components_own_release(
    tmp_path: Path, variables: dict[str, str], version: str
) -> None:
    rc, pips, _ = install(tmp_path, variables)
    assert rc == 0
    index = "https://gitlab-ci-token:job-token-1@gitlab.example.com/api/v4/projects/acme%2Facklab/packages/pypi/simple"
    assert pips == [
        f"-m pip install -q --no-deps --index-url {index} acklab=={version}",
        f"-m pip install -q acklab=={version}",
    ]


@pytest.mark.parametrize(
    ("variables", "code"), [({"ACKLAB_VERSION": "1.3.0"}, 0), ({}, 2)], ids=["installed", "no-release"]
)
def test_the_jobs_virtualenv_lasts_as_long_as_its_shell(
    tmp_path: Path, variables: dict[str, str], code: int
) -> None:
    # The job's script: sees it; nothing of it stays in TMPDIR once the job's shell exits, even
    # when the install step itself stopped the job.
    rc, _, _ = install(tmp_path, variables, then='ls -d "${ACKLAB%/bin/acklab}" > "$TMPDIR/seen"\n')
    assert rc == code
    if code == 0:
        (seen,) = (tmp_path / "seen").read_text().splitlines()
        assert Path(seen).parent == tmp_path
        assert Path(seen).name.startswith("acklab-venv.")
    assert not list(tmp_path.glob("acklab-venv.*"))


@pytest.mark.parametrize(
    "variables",
    [
        {"ACKLAB_COMPONENT": "@main"},  # a branch
        {"ACKLAB_COMPONENT": "@" + "4f" * 20},  # a commit
        {"ACKLAB_COMPONENT": "$[[ component.version ]]@$[[ component.reference ]]"},  # not filled in
        {"ACKLAB_COMPONENT": "1.4.0@1.4.0", "ACKLAB_VERSION": "latest"},  # not a release
        {},
    ],
    ids=["branch", "commit", "uninterpolated", "bad-version", "nothing"],
)
def test_no_release_named_installs_nothing_and_says_how(tmp_path: Path, variables: dict[str, str]) -> None:
    rc, pips, stderr = install(tmp_path, variables)
    assert (rc, pips) == (2, [])
    assert "set acklab_version (ACKLAB_VERSION)" in stderr
