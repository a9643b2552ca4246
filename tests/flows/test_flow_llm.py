"""The flow with the llm proposer against an OpenAI-compatible double: one retry, then exit 5."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from acklab.flows.worktree import repo_snapshot
from tests.doubles.openai_api import openai_double
from tests.flows import patches
from tests.flows.conftest import fast_spec, load_trail, run_git, write_decisions

pytestmark = pytest.mark.slow
KEY = "sk-double-0123456789abcdef"
APPROVE = {"gate": "approve", "decision": "approve", "actor": "carol"}


@pytest.fixture
def llm_env(monkeypatch):
    def use(script):
        monkeypatch.setenv("ACKLAB_LLM_BASE_URL", script.base_url)
        monkeypatch.setenv("ACKLAB_LLM_MODEL", "double-gpt")
        monkeypatch.setenv("ACKLAB_LLM_API_KEY", KEY)

    return use


def everything_written(out: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file())


SCENARIOS = {
    "a-good-diff": ([patches.reply(patches.GOOD)], 0, "published"),
    "b-file-under-tests": ([patches.reply(patches.TESTS_FILE)] * 2, 5, "refused"),
    "c-path-traversal-then-good": (
        [patches.reply(patches.TRAVERSAL), patches.reply(patches.GOOD)],
        0,
        "published",
    ),
    "d-gitlab-ci": ([patches.reply(patches.CI)] * 2, 5, "refused"),
    "e-prose-then-good": ([patches.PROSE, patches.reply(patches.GOOD)], 0, "published"),
    "f-prose-twice": ([patches.PROSE, patches.PROSE], 5, "refused"),
}
REASONS = {
    "b-file-under-tests": "'tests/test_green.py' is denied by scope rule 'tests/'",
    "c-path-traversal-then-good": "path traversal",
    "d-gitlab-ci": "'.gitlab-ci.yml' is denied by scope rule '.gitlab-ci.yml'",
    "e-prose-then-good": "carries no ```diff fenced block",
    "f-prose-twice": "carries no ```diff fenced block",
}


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_llm_scenarios(scenario, sandbox, tmp_path, acklab, llm_env):
    replies, expected_code, outcome = SCENARIOS[scenario]
    before = repo_snapshot(sandbox)
    out = tmp_path / "out"
    spec = fast_spec(tmp_path, strike_again=(), checks=("ruff",))
    decisions = write_decisions(tmp_path, [APPROVE])
    with openai_double(replies, api_key=KEY) as llm:
        llm_env(llm)
        code, stdout, stderr = acklab(
            sandbox,
            "flow",
            "run",
            spec,
            "--proposer",
            "llm",
            "--local",
            "--decisions",
            decisions,
            "--out",
            out,
            "--json",
        )
        prompts = [llm.prompt(i) for i in range(llm.calls)]
    assert code == expected_code, stdout
    assert len(prompts) == len(replies)  # one call per attempt: the first and at most one retry
    trail = load_trail(stdout)
    assert (trail["outcome"], trail["exit_code"]) == (outcome, expected_code)
    assert [p["proposer"] for p in trail["proposals"]] == ["llm"] * len(replies)
    for proposal in trail["proposals"]:
        [call] = proposal["llm_calls"]
        assert call["model"] == "double-gpt"
        assert call["prompt_tokens"] > 0
        assert call["completion_tokens"] > 0
        assert call["latency_ms"] > 0
    assert stderr.count("llm: asking double-gpt") == len(replies)
    proposes = [c for c in trail["checkpoints"] if c["name"] == "propose"]
    assert [c["attempt"] for c in proposes] == list(range(1, len(replies) + 1))
    if scenario in REASONS:
        reason = REASONS[scenario]
        assert not trail["proposals"][0]["guard"]["allowed"]
        assert any(reason in r for r in trail["proposals"][0]["guard"]["reasons"])
        assert proposes[0]["status"] == "refused"
        assert reason in prompts[1]  # the retry's prompt carries the reasons
    if expected_code == 5:
        assert all(c["status"] == "refused" for c in proposes)
        assert "the scope guard rejected the proposal and its retry" in trail["outcome_detail"]
        assert repo_snapshot(sandbox) == before  # status, diff, refs, worktrees: exactly as it was
    else:
        assert trail["proposals"][-1]["guard"]["allowed"]
        branch = json.loads(stdout)["published"]["branch"]
        assert run_git(sandbox, "diff", "--name-only", "main", branch).split() == ["app/webhooks.py"]
    assert KEY.encode() not in everything_written(out)


def test_a_modify_decision_sends_the_feedback_back_to_the_proposer(sandbox, tmp_path, acklab, llm_env):
    decisions = write_decisions(
        tmp_path,
        [
            {
                "gate": "approve",
                "decision": "modify",
                "actor": "carol",
                "feedback": "keep the 409 for conflicts",
            },
            APPROVE,
        ],
    )
    spec = fast_spec(tmp_path, strike_again=(), checks=("ruff",))
    with openai_double([patches.reply(patches.PARTIAL), patches.reply(patches.GOOD)], api_key=KEY) as llm:
        llm_env(llm)
        code, stdout, _ = acklab(
            sandbox,
            "flow",
            "run",
            spec,
            "--proposer",
            "llm",
            "--decisions",
            decisions,
            "--out",
            tmp_path / "out",
            "--json",
        )
        second = llm.prompt(1)
    assert code == 0
    assert "keep the 409 for conflicts" in second
    trail = load_trail(stdout)
    assert trail["outcome"] == "applied"  # neither --local nor --mr: verified, not published
    assert [(c["name"], c.get("attempt")) for c in trail["checkpoints"]][:4] == [
        ("reproduce", None),
        ("propose", 1),
        ("approve", 1),
        ("propose", 2),
    ]
    assert trail["checkpoints"][-1] == trail["checkpoints"][-1] | {"name": "publish", "status": "skipped"}


def test_a_gap_is_published_only_on_a_decision_taken_knowing_it(sandbox, tmp_path, acklab, llm_env):
    decisions = write_decisions(
        tmp_path,
        [
            APPROVE,
            {
                "gate": "approve-gap",
                "decision": "approve",
                "actor": "dave",
                "delegated_by": "erin",
                "reason": "conflicts are rare",
            },
        ],
    )
    with openai_double([patches.reply(patches.PARTIAL)], api_key=KEY) as llm:
        llm_env(llm)
        code, stdout, _ = acklab(
            sandbox, "flow", "run", fast_spec(tmp_path), "--proposer", "llm", "--local", "--decisions", decisions,
            "--out", tmp_path / "out", "--json",
        )  # fmt: skip
    assert code == 0
    trail = load_trail(stdout)
    by_name = {c["name"]: c for c in trail["checkpoints"]}
    strike = by_name["strike-again"]
    assert strike["status"] == "failed"
    assert strike["outputs"]["gaps"] == ["conflicting-payload"]
    assert strike["outputs"]["aimed"][0] | {"latency_before": 0, "latency_after": 0} == {
        "experiment": "lost-ack", "status": "held", "before": "fail", "after": "pass",
        "violations_after": 0, "latency_before": 0, "latency_after": 0,
    }  # fmt: skip
    options = strike["outputs"]["options"]
    assert [o["option"] for o in options] == ["A", "B"]
    a, b = options
    assert a["gain"]["experiments_fixed"] == ["lost-ack"]
    assert a["cost"]["experiments_still_failing"] == ["conflicting-payload"]
    assert "recipe" in b["title"]
    assert b["gain"]["experiments_fixed"] == ["conflicting-payload", "lost-ack"]
    assert b["cost"]["changed_lines"] > a["cost"]["changed_lines"]
    assert set(b["cost"]["latency_delta_vs_head"]) == {"lost-ack", "conflicting-payload"}
    assert not any("recommend" in json.dumps(o) for o in options)
    gap = by_name["approve-gap"]["decision"]
    assert (gap["decision"], gap["actor"], gap["delegated_by"]) == ("approve", "dave", "erin")
    assert trail["outcome"] == "published"


def test_auto_approve_never_publishes_a_gap(sandbox, tmp_path, acklab, llm_env):
    before = repo_snapshot(sandbox)
    with openai_double([patches.reply(patches.PARTIAL)], api_key=KEY) as llm:
        llm_env(llm)
        code, stdout, _ = acklab(
            sandbox, "flow", "run", fast_spec(tmp_path), "--proposer", "llm", "--local", "--auto-approve",
            "--out", tmp_path / "out", "--json",
        )  # fmt: skip
    assert code == 5
    trail = load_trail(stdout)
    assert trail["outcome"] == "refused"
    assert "--auto-approve does not decide the 'approve-gap' gate" in trail["outcome_detail"]
    assert repo_snapshot(sandbox) == before
