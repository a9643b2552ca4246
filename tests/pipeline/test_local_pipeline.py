"""The pipeline, executed: gitlab-ci-local 4.64.1 on a throw-away snapshot of the working
tree (scripts/pipeline.sh), shell executor, one isolated copy per job.

The job selection is read with `--list-json` (fast, no job runs); the whole default-branch
pipeline runs once in the slow test, which then opens every report where GitLab would
look for it. gitlab-ci-local comes from `make system-deps` (.tools/); nothing here skips
when it is missing.
"""

from __future__ import annotations

import glob
import json
import re
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from tests.pipeline.conftest import Pipeline
from tests.pipeline.gitlab import gcl_job_dir, job_names, load_ci, resolve_job

SHARDS = ["attack:live: [1/2]", "attack:live: [2/2]"]
# The run component always runs in `parallel:` (its `shards` input), one shard here.
UNSAFE, UNSAFE_SLUG = "reproduce:unsafe: [1/1]", "reproduce-unsafe-1-1"
CODE_JOBS = ["lint", "typecheck", "bandit", "pytest"]
LAB_JOBS = [UNSAFE, *SHARDS, "evidence"]


def listed(gitlab_ci_local: Pipeline, *args: str) -> dict[str, dict[str, Any]]:
    done = gitlab_ci_local("--list-json", *args)
    assert done.returncode == 0, done.stderr[-3000:]
    jobs = json.loads(done.stdout[done.stdout.index("[") :])
    return {job["name"]: job for job in jobs}


def selected(jobs: dict[str, dict[str, Any]]) -> dict[str, str]:
    return {name: job["when"] for name, job in jobs.items() if job["when"] != "never"}


def test_default_branch_pipeline_selects_the_lab_and_pages(gitlab_ci_local: Pipeline) -> None:
    jobs = listed(gitlab_ci_local)
    assert selected(jobs) == {
        **dict.fromkeys([*CODE_JOBS, UNSAFE, *SHARDS], "on_success"),
        "evidence": "always",
        "pages": "on_success",
    }


def test_merge_request_pipeline_selects_the_lab_and_offers_the_repair(gitlab_ci_local: Pipeline) -> None:
    jobs = listed(gitlab_ci_local, "--mr")
    assert selected(jobs) == {
        **dict.fromkeys([*CODE_JOBS, UNSAFE, *SHARDS], "on_success"),
        "evidence": "always",
        "repair": "manual",
    }
    assert jobs["repair"]["allow_failure"] is True
    assert jobs["pages"]["when"] == "never"
    assert jobs["release"]["when"] == jobs["catalog"]["when"] == "never"


def test_a_tag_pipeline_tests_everything_then_releases(gitlab_ci_local: Pipeline) -> None:
    jobs = listed(gitlab_ci_local, "--tag", "0.1.0")
    assert selected(jobs) == {
        **dict.fromkeys([*CODE_JOBS, UNSAFE, *SHARDS, "release", "catalog"], "on_success"),
        "evidence": "always",
    }


# --- the whole pipeline ---------------------------------------------------------------

ANSI = re.compile(r"\x1b\[[0-9;]*m")
SUMMARY = re.compile(r"^ (?P<status>PASS|FAIL|WARN)\s+\[\s*(?P<took>[^\]]+?)\]\s+(?P<job>.+?)\s*$")


def job_results(output: str) -> dict[str, tuple[str, str]]:
    """job name -> (status, duration) from gitlab-ci-local's closing summary."""
    results = {}
    for line in ANSI.sub("", output).splitlines():
        if match := SUMMARY.match(line):
            results[match["job"]] = (match["status"], match["took"])
    return results


def test_job_results_reads_the_summary() -> None:
    summary = (
        " PASS  [ 8.6 s] reproduce:unsafe  \n FAIL  [ 1.95 s] attack:live: [1/2]\n  >  Found 11 errors.\n"
    )
    assert job_results(summary) == {
        "reproduce:unsafe": ("PASS", "8.6 s"),
        "attack:live: [1/2]": ("FAIL", "1.95 s"),
    }


def failure_log(
    workdir: Path, done: subprocess.CompletedProcess[str], results: dict[str, tuple[str, str]]
) -> str:
    """What to read when the run failed: the end of each failed job's own log."""
    parts = [f"exit {done.returncode}; jobs: {results}", done.stderr[-1500:]]
    for job, (status, _) in results.items():
        if status != "PASS":
            output = workdir / ".gitlab-ci-local" / "output" / f"{gcl_job_dir(job)}.log"
            text = output.read_text(errors="replace") if output.exists() else "(no log)"
            parts.append(f"--- {job}: {status} (last lines of its log) ---\n{text[-4000:]}")
    if not results:
        parts.append(ANSI.sub("", done.stdout)[-6000:])
    return "\n".join(parts)


def artifacts(workdir: Path, job: str) -> Path:
    return workdir / ".gitlab-ci-local" / "artifacts" / gcl_job_dir(job)


def reports_of(name: str) -> dict[str, str]:
    """A job's `artifacts:reports` as the pipeline declares them (base name for shards)."""
    base = name.split(": [", maxsplit=1)[0]
    return resolve_job(load_ci(), base).get("artifacts", {}).get("reports", {})


def junit_counts(path: Path) -> dict[str, int]:
    root = ET.parse(path).getroot()
    cases = root.iter("testcase")
    counts = {"tests": 0, "failures": 0, "errors": 0}
    for case in cases:
        counts["tests"] += 1
        counts["failures"] += len(case.findall("failure"))
        counts["errors"] += len(case.findall("error"))
    return counts


PYTEST_PATHS = "tests/test_layers.py tests/evidence/test_documents.py tests/app/test_signing.py"


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_the_default_branch_pipeline_runs_locally(tmp_path: Path, gitlab_ci_local: Pipeline) -> None:
    workdir = tmp_path / "pipeline"
    started = time.monotonic()
    # The test job runs a few files: the pipeline is what is under test here, and `make test`
    # runs every test outside it.
    done = gitlab_ci_local("--workdir", str(workdir), timeout=1400, env={"ACKLAB_PYTEST_PATHS": PYTEST_PATHS})
    elapsed = time.monotonic() - started
    results = job_results(done.stdout)
    log = failure_log(workdir, done, results)

    expected = [*CODE_JOBS, *LAB_JOBS, "pages"]
    # core:lower-bounds installs from the package index: GitLab runs it, a local run skips it
    # (tests/test_core_install.py installs the same core at the same bounds); the bench runs in
    # scheduled pipelines only (tests/pipeline/test_ci_rules.py).
    skipped = {"repair", "release", "catalog", "core:lower-bounds", "bench"}
    assert set(job_names(load_ci())) - skipped == {j.split(": [")[0] for j in expected}
    assert {job: status for job, (status, _) in results.items()} == dict.fromkeys(expected, "PASS"), log
    assert done.returncode == 0, log
    # A few minutes on two cores; a pipeline that outgrows this stops being run by hand.
    assert elapsed < 600, f"the local pipeline took {elapsed:.0f}s: {results}"

    # Every declared report is where GitLab reads it: in the job's artifacts, at its path;
    # except an expected reproduction's JUnit, which must stay out of the MR test widget.
    for job in expected:
        for kind, pattern in reports_of(job).items():
            found = glob.glob(pattern, root_dir=artifacts(workdir, job))
            if job == UNSAFE and kind == "junit":
                assert not found, "an expected failure must not show as failing tests"
            else:
                assert found, f"{job}: no {kind} report at {pattern}"

    quality = json.loads((artifacts(workdir, "lint") / "gl-code-quality-report.json").read_text())
    assert quality == [], "ruff passed, so the Code Quality report has no findings"

    sast = json.loads((artifacts(workdir, "bandit") / "gl-sast-report.json").read_text())
    assert sast["scan"]["type"] == "sast"
    assert isinstance(sast["vulnerabilities"], list)

    tests = junit_counts(artifacts(workdir, "pytest") / "reports" / "pytest.xml")
    assert tests["tests"] > 0
    assert tests["failures"] == tests["errors"] == 0

    # The reproduction failed as it must, and left verifiable evidence.
    unsafe = json.loads((artifacts(workdir, UNSAFE) / "out" / f"{UNSAFE_SLUG}.run.json").read_text())
    assert unsafe["verdict"] == "fail"
    assert any(e["violations"] for e in unsafe["experiments"])

    # Each shard ran its part of the plan and reported its verdicts for the MR widget.
    experiments: set[str] = set()
    for index, shard in enumerate(SHARDS, start=1):
        slug = f"attack-live-{index}-{len(SHARDS)}"
        record = json.loads((artifacts(workdir, shard) / "out" / f"{slug}.run.json").read_text())
        assert record["verdict"] == "pass"
        experiments |= {e["name"] for e in record["experiments"]}
        live = junit_counts(artifacts(workdir, shard) / "reports" / f"acklab-{slug}.xml")
        assert live["failures"] == live["errors"] == 0

    # The evidence job merged the shards through needs: and everything it kept verifies.
    evidence = artifacts(workdir, "evidence") / "out"
    merged = [p.parent for p in (evidence / "merged").glob("*/manifest.json")]
    assert len(merged) == 1, sorted(str(p) for p in evidence.rglob("manifest.json"))
    manifest = json.loads((merged[0] / "manifest.json").read_text())
    assert len(manifest["merged_from"]) == len(SHARDS)
    run = json.loads((merged[0] / "run.json").read_text())
    assert run["verdict"] == "pass"
    assert experiments <= {e["name"] for e in run["experiments"]}
    assert not list(evidence.glob("attack-live-*/")), "the shard copies live inside the merged bundle"
    verify = subprocess.run(
        [str(Path(sys.executable).with_name("acklab")), "evidence", "verify", str(evidence)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert verify.returncode == 0, verify.stdout + verify.stderr

    assert (artifacts(workdir, "pages") / "public" / "index.html").is_file()
    # acklab's reference, built by the pages job (mkdocs build --strict), beside the console
    assert (artifacts(workdir, "pages") / "public" / "docs" / "cli.html").is_file()

    # Every lab job took the pipeline's seed, so the Pages snapshot compares the unsafe and the
    # live handler delivery by delivery: a pair per experiment, each page pre-rendered.
    seeds = {seed_of(workdir, UNSAFE, UNSAFE_SLUG)}
    seeds |= {seed_of(workdir, shard, f"attack-live-{n}-{len(SHARDS)}") for n, shard in enumerate(SHARDS, 1)}
    (seed,) = seeds
    public = artifacts(workdir, "pages") / "public"
    compare = (public / "compare" / "index.html").read_text(encoding="utf-8")
    assert "Nothing to compare" not in compare
    pairs = re.findall(r'<a class="button" href="([^"]+)">Compare</a>', compare)
    assert len(pairs) == len(experiments), compare[-3000:]
    for href in pairs:
        page = (public / "compare" / href).read_text(encoding="utf-8")
        # titled with both revisions (each handler module's sha256)
        assert re.search(r'fixture:unsafe <span class="rev">handler [0-9a-f]{8}</span> <span class="muted">vs</span> '
                         r'fixture:live <span class="rev">handler [0-9a-f]{8}</span>', page)  # fmt: skip
        assert f"seed {seed}: the same deliveries under the same faults" in page
        # opened at the first delivery where the handlers differ (the first when they never do)
        steps = re.findall(
            r'<section class="step-panel( current)?" id="step-(\d+)"(.*?)</section>', page, flags=re.S
        )
        differ = [n for _, n, body in steps if "the handlers differ here" in body]
        current = [n for mark, n, _ in steps if mark]
        assert current == [differ[0] if differ else "1"], href


def seed_of(workdir: Path, job: str, slug: str) -> int:
    """The seed a lab job's run recorded in its bundle."""
    [run] = (artifacts(workdir, job) / "out" / slug).glob("*/run.json")
    return int(json.loads(run.read_text(encoding="utf-8"))["seed"])
