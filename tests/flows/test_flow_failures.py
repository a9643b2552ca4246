"""The flow when the lab, the proposer or the person at the keyboard stops it: exit codes and trail."""

from __future__ import annotations

import json

import pytest

from acklab.flows.approvals import Question
from acklab.flows.proposers.llm import LLMProposer
from acklab.flows.proposers.recipe import RecipeProposer
from acklab.flows.publish import LocalPublisher
from acklab.flows.runner import FlowConfig, run_flow
from acklab.flows.spec import LLMSettings, load_spec
from acklab.flows.worktree import repo_snapshot
from tests.flows.conftest import fast_spec

pytestmark = pytest.mark.slow


class Interrupt:
    name = "tty"

    def decide(self, question: Question):
        raise KeyboardInterrupt


def config(sandbox, tmp_path, *, proposer=None, decisions=None):
    spec = load_spec(fast_spec(tmp_path))
    return FlowConfig(
        repo=sandbox,
        spec=spec,
        out=tmp_path / "out",
        proposer=proposer or RecipeProposer(),
        decisions=decisions or Interrupt(),
        publisher=LocalPublisher(sandbox),
        echo=lambda _: None,
    )


def test_an_interrupt_leaves_a_trail_and_the_repository_as_it_was(sandbox, tmp_path):
    before = repo_snapshot(sandbox)
    result = run_flow(config(sandbox, tmp_path))
    assert (result.exit_code, result.outcome) == (6, "interrupted")
    trail = json.loads((result.bundle / "trail.json").read_text())
    assert trail["checkpoints"][-1]["name"] == "approve"
    assert trail["checkpoints"][-1]["status"] == "failed"
    assert (result.bundle / "manifest.json").is_file()
    assert repo_snapshot(sandbox) == before


def test_an_unreachable_model_is_a_lab_error(sandbox, tmp_path):
    down = LLMProposer(
        base_url="http://127.0.0.1:9/v1", model="m", api_key="sk-x", settings=LLMSettings(timeout_s=2)
    )
    result = run_flow(config(sandbox, tmp_path, proposer=down))
    assert (result.exit_code, result.outcome) == (4, "error")
    assert "cannot reach the model endpoint http://127.0.0.1:9/v1/chat/completions" in result.detail
    trail = json.loads((result.bundle / "trail.json").read_text())
    assert (trail["checkpoints"][-1]["name"], trail["checkpoints"][-1]["status"]) == ("propose", "failed")


def test_an_unknown_experiment_is_a_lab_error_not_a_verdict(sandbox, tmp_path, acklab):
    spec = fast_spec(tmp_path, reproduce=("no-such-experiment",))
    code, stdout, _ = acklab(sandbox, "flow", "run", spec, "--out", tmp_path / "out", "--json")
    assert code in (3, 4)
    assert json.loads(stdout)["outcome"] == "error"


def test_flags_that_exclude_each_other_are_usage_errors(sandbox, tmp_path, acklab):
    spec = fast_spec(tmp_path)
    assert acklab(sandbox, "flow", "run", spec, "--local", "--mr", "3")[0] == 2
    assert acklab(sandbox, "flow", "run", spec, "--auto-approve", "--decisions", tmp_path / "d.yaml")[0] == 2
    code, _, err = acklab(sandbox, "flow", "run", spec, "--mr", "three")
    assert code == 2
    assert "got 'three'; expected a merge request IID" in err
