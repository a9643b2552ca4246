"""The recipe: its template is the repository's own handler, and its diff repairs the unsafe one."""

from __future__ import annotations

from acklab.flows.proposers import ProposalRequest, make_proposer
from acklab.flows.proposers.recipe import recipe_template
from acklab.flows.spec import load_spec
from tests.flows.conftest import LIVE, ROOT, UNSAFE, run_git

SPEC = load_spec(ROOT / "flows" / "repair.yaml")


def request(source: str, feedback: str | None = None) -> ProposalRequest:
    return ProposalRequest(
        handler_path="app/webhooks.py",
        handler_source=source,
        incident_summary="lost-ack: fail",
        failing_experiments=("lost-ack",),
        scope=SPEC.scope,
        limits=SPEC.limits,
        feedback=feedback,
    )


def test_the_template_is_the_live_handler_so_they_never_drift():
    # Regenerate with: cp app/webhooks.py flows/recipes/receipt_handler.py.txt
    assert recipe_template("receipt-handler") == LIVE


def test_the_recipe_turns_the_unsafe_handler_into_the_live_one(small_repo):
    proposal = make_proposer("recipe", SPEC).propose(request(UNSAFE))
    assert proposal.proposer == "recipe"
    assert proposal.recipe == "receipt-handler"
    assert proposal.llm_calls == ()
    run_git(small_repo, "apply", "-", input_text=proposal.diff)
    assert (small_repo / "app/webhooks.py").read_text() == LIVE


def test_the_recipe_is_deterministic_and_notes_feedback_it_cannot_take():
    proposer = make_proposer("recipe", SPEC)
    first = proposer.propose(request(UNSAFE))
    again = proposer.propose(request(UNSAFE, feedback="make it shorter"))
    assert first.diff == again.diff
    assert "make it shorter" in again.rationale


def test_nothing_to_propose_when_the_recipe_is_already_in_place():
    proposal = make_proposer("recipe", SPEC).propose(request(LIVE))
    assert proposal.diff == ""
    assert "already is the receipt-handler recipe's handler" in proposal.problems[0]
