"""The `recipe` proposer: offline and deterministic, it restores the known-good handler.

The failure class the harness finds in a lost-ack, duplicate or conflicting delivery has
one known repair: a transactional receipt keyed by the event id, so that the database's
uniqueness decides which delivery produces the effect, duplicates are acknowledged
without a second one, and a different body under a reused id is rejected. The recipe's
template is that handler, kept in `flows/recipes/` (a test keeps it equal to the repository's
own `app/webhooks.py`); the proposal is the diff from the current handler to it.
"""

from __future__ import annotations

from importlib import resources

from acklab.flows.diffs import make_diff
from acklab.flows.errors import FlowSpecInvalid

from .base import Proposal, ProposalRequest

RECIPES = {"receipt-handler": "receipt_handler.py.txt"}
RATIONALE = (
    "Restore the receipt-based handler: one transaction records a receipt keyed by the event id "
    "together with the effect, so the database's uniqueness decides which delivery wins; a "
    "duplicate or retried delivery is acknowledged without a second effect, and a different body "
    "under a reused event id is rejected."
)


def recipe_template(name: str) -> str:
    """The handler source a recipe restores."""
    if name not in RECIPES:
        raise FlowSpecInvalid(f"unknown recipe {name!r}; known recipes: {', '.join(sorted(RECIPES))}")
    return resources.files("acklab.flows").joinpath("recipes", RECIPES[name]).read_text(encoding="utf-8")


class RecipeProposer:
    """Proposes the diff from the current handler to the recipe's template."""

    name = "recipe"

    def __init__(self, recipe: str = "receipt-handler") -> None:
        self.recipe = recipe
        self.template = recipe_template(recipe)

    def propose(self, request: ProposalRequest) -> Proposal:
        rationale = RATIONALE
        if request.feedback:
            rationale += f" (A recipe is fixed and cannot take feedback; it was: {request.feedback!r}.)"
        diff = make_diff(request.handler_path, request.handler_source, self.template)
        problems: tuple[str, ...] = ()
        if not diff:
            problems = (
                f"{request.handler_path} already is the {self.recipe} recipe's handler; "
                "the failure lies outside what this recipe repairs",
            )
        return Proposal(
            proposer="recipe", diff=diff, rationale=rationale, recipe=self.recipe, problems=problems
        )
