"""The llm proposer against an OpenAI-compatible double over a real socket."""

from __future__ import annotations

import io

import pytest

from acklab.evidence.loading import INPUT
from acklab.flows.diffs import make_diff
from acklab.flows.errors import FlowSpecInvalid, ModelReplyInvalid, ProposerUnavailable
from acklab.flows.proposers.llm import LLMProposer
from acklab.flows.spec import LLMSettings, load_spec
from tests.doubles.openai_api import openai_double
from tests.flows.conftest import LIVE, ROOT, UNSAFE
from tests.flows.test_recipe import request

pytestmark = pytest.mark.slow
SPEC = load_spec(ROOT / "flows" / "repair.yaml")
KEY = "sk-double-secret-1234567890"
GOOD = make_diff("app/webhooks.py", UNSAFE, LIVE)


def proposer(llm, echo=None, key=KEY):
    return LLMProposer(
        base_url=llm.base_url, model="double-gpt", api_key=key, settings=LLMSettings(timeout_s=10), echo=echo
    )


def test_a_good_reply_is_one_diff_with_its_call_recorded_and_shown():
    echo = io.StringIO()
    reply = f"Use a receipt.\n\n```diff\n{GOOD}```\n"
    with openai_double([reply], api_key=KEY) as llm:
        proposal = proposer(llm, echo).propose(request(UNSAFE))
        assert llm.requests[0]["authorized"]
        prompt = llm.prompt(0)
    assert proposal.diff == GOOD
    assert proposal.rationale == "Use a receipt."
    [call] = proposal.llm_calls
    assert call.model == "double-gpt"
    assert call.completion_tokens == len(reply.split())
    assert call.prompt_tokens == len(prompt.split())
    assert call.latency_ms > 0
    shown = echo.getvalue()
    assert "asking double-gpt" in shown
    assert f"completion {call.completion_tokens} tokens" in shown
    assert KEY not in shown
    # the prompt carries the incident, the handler and the scope rules
    assert "lost-ack: fail" in prompt
    assert "def process(" in prompt
    assert "change only these paths: app/webhooks.py" in prompt
    assert "tests/" in prompt


def test_rejection_reasons_and_feedback_go_into_the_next_prompt():
    import dataclasses

    with openai_double(["no diff"], api_key=KEY) as llm:
        retry = dataclasses.replace(
            request(UNSAFE, feedback="keep the 409"), attempt=2, rejection_reasons=("'tests/x.py' is denied",)
        )
        proposer(llm).propose(retry)
        prompt = llm.prompt(0)
    assert "rejected by the scope guard" in prompt
    assert "'tests/x.py' is denied" in prompt
    assert "keep the 409" in prompt


@pytest.mark.parametrize(
    ("reply", "problem"),
    [
        ("I would add a receipt table.", "carries no ```diff fenced block"),
        (f"```diff\n{GOOD}```\n```diff\n{GOOD}```", "carries 2 ```diff blocks"),
    ],
)
def test_replies_without_exactly_one_diff_are_problems(reply, problem):
    with openai_double([reply]) as llm:
        proposal = proposer(llm, key=None).propose(request(UNSAFE))
    assert proposal.diff == ""
    assert problem in proposal.problems[0]
    assert len(proposal.llm_calls) == 1


def test_a_wrong_key_is_a_lab_error_that_never_shows_the_key():
    with openai_double(["x"], api_key="sk-other") as llm, pytest.raises(ProposerUnavailable) as info:
        proposer(llm).propose(request(UNSAFE))
    assert "HTTP 401" in str(info.value)
    assert KEY not in str(info.value)
    assert int(info.value.exit_code) == 4


def test_an_unreachable_endpoint_is_a_lab_error():
    unreachable = LLMProposer(
        base_url="http://127.0.0.1:9/v1", model="m", api_key=KEY, settings=LLMSettings(timeout_s=2)
    )
    with pytest.raises(ProposerUnavailable, match="cannot reach the model endpoint"):
        unreachable.propose(request(UNSAFE))


def test_configuration_comes_from_the_environment():
    with pytest.raises(FlowSpecInvalid, match="ACKLAB_LLM_BASE_URL and ACKLAB_LLM_MODEL"):
        LLMProposer.from_env(LLMSettings(), env={})
    made = LLMProposer.from_env(
        LLMSettings(), env={"ACKLAB_LLM_BASE_URL": "http://x/v1/", "ACKLAB_LLM_MODEL": "m"}
    )
    assert (made.base_url, made.model) == ("http://x/v1", "m")


def test_a_model_slower_than_its_timeout_is_a_lab_error():
    slow = LLMSettings(timeout_s=0.5)
    with (
        openai_double(["never read"], api_key=KEY, delay_s=3) as llm,
        pytest.raises(ProposerUnavailable) as info,
    ):
        LLMProposer(base_url=llm.base_url, model="double-gpt", api_key=KEY, settings=slow).propose(
            request(UNSAFE)
        )
    assert "ReadTimeout" in str(info.value)
    assert int(info.value.exit_code) == 4


def test_a_reply_larger_than_acklab_reads_is_refused():
    huge = "x" * (INPUT.max_bytes + 10)
    with openai_double([huge], api_key=KEY) as llm, pytest.raises(ModelReplyInvalid) as info:
        proposer(llm).propose(request(UNSAFE))
    assert "more than" in str(info.value)
    assert int(info.value.exit_code) == 3
