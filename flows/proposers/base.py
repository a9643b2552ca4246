"""The one proposer interface: given what failed and the handler's source, propose one diff."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from acklab.flows.spec import Limits, Scope


@dataclass(frozen=True)
class ProposalRequest:
    """Everything a proposer may know. Rejection reasons and approver feedback come back here."""

    handler_path: str
    handler_source: str
    incident_summary: str
    failing_experiments: tuple[str, ...]
    scope: Scope
    limits: Limits
    attempt: int = 1
    rejection_reasons: tuple[str, ...] = ()
    feedback: str | None = None
    # How the lab counts the handler's effects and what it expects (the target spec's effects: and
    # expect:), and what the patched file may import (capabilities.imports).
    target_brief: str = ""
    imports: tuple[str, ...] = ()


@dataclass(frozen=True)
class LLMCall:
    """One call to a language model, as recorded in the trail (never the API key)."""

    model: str
    prompt_tokens: int | None
    completion_tokens: int | None
    latency_ms: float
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "latency_ms": self.latency_ms,
            "error": self.error,
        }


@dataclass(frozen=True)
class Proposal:
    """A candidate patch. `diff` is empty when the proposer's answer carried none."""

    proposer: str
    diff: str
    rationale: str
    recipe: str | None = None
    llm_calls: tuple[LLMCall, ...] = field(default_factory=tuple)
    problems: tuple[str, ...] = ()


class Proposer(Protocol):
    """Proposes one unified diff for a failing handler."""

    name: str

    def propose(self, request: ProposalRequest) -> Proposal:
        """Return one proposal; raise ProposerUnavailable when no answer could be obtained."""
        ...
