"""Proposers: `recipe` (offline, deterministic, the default) and `llm` (an OpenAI-compatible endpoint)."""

from __future__ import annotations

from acklab.flows.errors import FlowSpecInvalid
from acklab.flows.spec import FlowSpec

from .base import LLMCall, Proposal, ProposalRequest, Proposer

__all__ = ["LLMCall", "Proposal", "ProposalRequest", "Proposer", "make_proposer"]


def make_proposer(name: str, spec: FlowSpec) -> Proposer:
    """The proposer called `name` ('recipe' or 'llm'), configured from the spec and the environment."""
    if name == "recipe":
        if not spec.target.startswith("fixture:"):
            raise FlowSpecInvalid(
                f"proposer recipe: the recipes repair acklab's own fixture, not target {spec.target!r}; "
                "use the llm proposer (proposer: {default: llm}, or --proposer llm) with ACKLAB_LLM_BASE_URL"
            )
        from .recipe import RecipeProposer

        return RecipeProposer(spec.recipe)
    if name == "llm":
        from .llm import LLMProposer

        return LLMProposer.from_env(spec.llm)
    raise FlowSpecInvalid(f"unknown proposer {name!r}; expected 'recipe' or 'llm'")
