"""What the pipeline promises, read from the files: when pipelines and jobs run, and what
each job hands to GitLab (reports, artifacts, expiry)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.pipeline.gitlab import (
    UnsupportedExpression,
    creates_pipeline,
    evaluate,
    job_names,
    job_when,
    load_ci,
    resolve_job,
)

CI = load_ci()

# The variables GitLab sets for each kind of pipeline (an MR pipeline has no CI_COMMIT_BRANCH;
# a branch push with an open MR carries CI_OPEN_MERGE_REQUESTS).
DEFAULT = {"CI_DEFAULT_BRANCH": "main", "CI_PROJECT_PATH": "acme/acklab"}
MR = {
    **DEFAULT,
    "CI_PIPELINE_SOURCE": "merge_request_event",
    "CI_MERGE_REQUEST_IID": "7",
    "CI_COMMIT_REF_NAME": "fix-handler",
}
PUSH_MAIN = {**DEFAULT, "CI_PIPELINE_SOURCE": "push", "CI_COMMIT_BRANCH": "main"}
PUSH_MR_BRANCH = {
    **DEFAULT,
    "CI_PIPELINE_SOURCE": "push",
    "CI_COMMIT_BRANCH": "fix-handler",
    "CI_OPEN_MERGE_REQUESTS": "acme/acklab!7",
}
PUSH_BRANCH = {**DEFAULT, "CI_PIPELINE_SOURCE": "push", "CI_COMMIT_BRANCH": "spike"}
PUSH_TAG = {**DEFAULT, "CI_PIPELINE_SOURCE": "push", "CI_COMMIT_TAG": "0.1.0"}
SCHEDULE_MAIN = {**DEFAULT, "CI_PIPELINE_SOURCE": "schedule", "CI_COMMIT_BRANCH": "main"}


@pytest.mark.parametrize(
    ("variables", "expected"),
    [
        (MR, True),
        (PUSH_MAIN, True),
        (SCHEDULE_MAIN, True),
        (PUSH_MR_BRANCH, False),
        (PUSH_BRANCH, False),
        (PUSH_TAG, True),
    ],
    ids=["mr", "push-main", "schedule-main", "push-mr-branch", "push-branch", "tag"],
)
def test_workflow_creates_pipelines_for_mrs_the_default_branch_and_tags(
    variables: dict[str, str], expected: bool
) -> None:
    assert creates_pipeline(CI, variables) is expected


def test_a_push_to_an_mr_branch_makes_exactly_one_pipeline() -> None:
    """GitLab evaluates the push and the MR event separately; exactly one may run."""
    both = [creates_pipeline(CI, PUSH_MR_BRANCH), creates_pipeline(CI, MR)]
    assert both == [False, True]


def selection(variables: dict[str, str]) -> dict[str, str]:
    jobs = {name: job_when(resolve_job(CI, name), variables) for name in job_names(CI)}
    return {name: when for name, when in jobs.items() if when != "never"}


LAB_AND_CODE = {
    "lint",
    "typecheck",
    "bandit",
    "pytest",
    "core:lower-bounds",
    "reproduce:unsafe",
    "attack:live",
}


def test_merge_request_pipelines_offer_the_repair_and_never_publish_pages() -> None:
    selected = selection(MR)
    assert set(selected) == LAB_AND_CODE | {"evidence", "repair"}
    assert selected["repair"] == "manual"
    assert resolve_job(CI, "repair")["rules"][0]["allow_failure"] is True


def test_default_branch_pipelines_publish_pages_and_never_offer_the_repair() -> None:
    selected = selection(PUSH_MAIN)
    assert set(selected) == LAB_AND_CODE | {"evidence", "pages"}


def test_a_tag_pipeline_tests_everything_then_releases() -> None:
    selected = selection(PUSH_TAG)
    assert set(selected) == LAB_AND_CODE | {"evidence", "release", "catalog"}
    assert selected["release"] == selected["catalog"] == "on_success"


def test_the_benchmark_runs_in_scheduled_pipelines_only() -> None:
    # The suite runs each reliability scenario once; their 20/20 figures are the bench's, and a
    # nightly schedule is where it runs.
    assert set(selection(SCHEDULE_MAIN)) == LAB_AND_CODE | {"evidence", "pages", "bench"}
    for variables in (MR, PUSH_MAIN, PUSH_TAG):
        assert "bench" not in selection(variables)
    bench = job("bench")
    assert "python -m bench" in bench["script"]
    assert bench["variables"]["GIT_DEPTH"] == "0"  # the cost figure exports an older commit
    assert "bench/results.json" in bench["artifacts"]["paths"]


def test_evidence_is_merged_even_when_a_verdict_failed() -> None:
    assert selection(MR)["evidence"] == "always"


def job(name: str) -> dict[str, Any]:
    return resolve_job(CI, name)


@pytest.mark.parametrize(
    ("name", "report", "path"),
    [
        ("lint", "codequality", "gl-code-quality-report.json"),
        ("bandit", "sast", "gl-sast-report.json"),
        ("pytest", "junit", "reports/pytest.xml"),
        ("attack:live", "junit", "reports/acklab-*.xml"),
    ],
)
def test_reports_reach_gitlab_even_from_a_failing_job(name: str, report: str, path: str) -> None:
    artifacts = job(name)["artifacts"]
    assert artifacts["reports"][report] == path
    assert artifacts["when"] == "always"
    assert "expire_in" in artifacts


def test_the_code_quality_report_is_written_without_hiding_findings() -> None:
    script = job("lint")["script"]
    assert any("--output-format=gitlab" in line and "--exit-zero" in line for line in script)
    assert "ruff check ." in script, "the job must still fail on findings"


def test_the_lint_job_fails_on_a_function_past_complexity_25_in_any_package() -> None:
    script = job("lint")["script"]
    checks = [line.split() for line in script if "scripts/complexity.py" in line]
    assert len(checks) == 1, script
    assert set(checks[0][2:]) == {"acklab", "app", "harness", "evidence", "console", "flows"}


def test_the_sast_report_goes_through_acklab_and_bandit_still_gates() -> None:
    script = job("bandit")["script"]
    assert any(
        line.startswith("acklab evidence sast bandit.json --out gl-sast-report.json") for line in script
    )
    assert any(line.startswith("bandit ") and "--exit-zero" not in line for line in script)


def test_the_unsafe_handler_is_an_expected_reproduction() -> None:
    unsafe = job("reproduce:unsafe")
    assert unsafe["variables"]["ACKLAB_TARGET"] == "fixture:unsafe"
    assert unsafe["variables"]["ACKLAB_EXPECT"] == "fail"
    # (that an expected failure writes no JUnit for the MR widget: test_ci_templates.py)


def test_the_live_handler_is_sharded_over_runners_and_merged_through_needs() -> None:
    live = job("attack:live")
    assert live["variables"]["ACKLAB_TARGET"] == "fixture:live"
    assert live.get("variables", {}).get("ACKLAB_EXPECT", "pass") == "pass"
    assert isinstance(live["parallel"], int)
    assert live["parallel"] >= 2
    assert "--shard=$CI_NODE_INDEX/$CI_NODE_TOTAL" in "\n".join(live["script"])
    evidence = job("evidence")
    assert {"job": "attack:live", "artifacts": True} in evidence["needs"]
    assert {"job": "reproduce:unsafe", "artifacts": True} in evidence["needs"]
    assert evidence["variables"]["ACKLAB_SHARDS"] == "out/attack-live-*/"
    assert "expire_in" in evidence["artifacts"]


def test_pages_publishes_public_from_the_default_branch_only() -> None:
    pages = job("pages")
    assert pages["pages"] == {"publish": "public"}
    assert pages["artifacts"]["paths"] == ["public"]
    assert pages["rules"] == [{"if": "$CI_COMMIT_BRANCH == $CI_DEFAULT_BRANCH"}]
    assert (
        '"${ACKLAB:-acklab}" pages --evidence out --out public ${ACKLAB_DOCS:+--docs "$ACKLAB_DOCS"}'
        in pages["script"]
    )
    # acklab's own pages job builds its reference and publishes it beside the console
    assert pages["variables"]["ACKLAB_DOCS"] == "site"
    assert "python -m mkdocs build --strict -d site" in pages["before_script"]


def test_repair_is_manual_never_blocks_and_targets_the_mr() -> None:
    repair = job("repair")
    assert repair["rules"] == [
        {"if": '$CI_PIPELINE_SOURCE == "merge_request_event"', "when": "manual", "allow_failure": True}
    ]
    assert repair["variables"]["ACKLAB_FLOW"] == "flows/repair.yaml"
    assert '"${ACKLAB:-acklab}" flow run "$ACKLAB_FLOW" --mr "$CI_MERGE_REQUEST_IID"' in repair["script"]


def test_no_job_runs_on_an_image_it_does_not_name() -> None:
    for name in job_names(CI):
        assert job(name).get("image", CI["default"].get("image")), name


# --- the rules:if evaluator itself --------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "variables", "expected"),
    [
        ("$A", {"A": "x"}, True),
        ("$A", {"A": ""}, False),
        ("$A", {}, False),
        ('$A == "x"', {"A": "x"}, True),
        ("$A == $B", {"A": "main", "B": "main"}, True),
        ("$A == $B", {"B": "main"}, False),
        ("$A != null", {"A": "x"}, True),
        ("$A && $B", {"A": "1"}, False),
        ("$A || $B", {"B": "1"}, True),
        ('$A == "1" || $B && $C', {"A": "1"}, True),
        ('($A == "1" || $B) && $C', {"A": "1"}, False),
        ("${A} == 'x'", {"A": "x"}, True),
    ],
)
def test_evaluate(expression: str, variables: dict[str, str], expected: bool) -> None:
    assert evaluate(expression, variables) is expected


@pytest.mark.parametrize("expression", ["$A =~ /x/", "$A ==", "($A", "$A $B", "exists"])
def test_evaluate_refuses_what_it_does_not_understand(expression: str) -> None:
    with pytest.raises(UnsupportedExpression):
        evaluate(expression, {"A": "x"})
