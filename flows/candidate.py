"""A proposal the scope guard allowed, as the flow carries it from the approve gate to publishing."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from acklab.evidence.documents.trail import LlmCall, Proposal


@dataclass(frozen=True)
class Candidate:
    """A proposal the scope guard allowed: the trail's record of it, its size and its rationale."""

    proposal: Proposal
    changed_lines: int
    rationale: str

    @property
    def id(self) -> str:
        return self.proposal.id

    @property
    def proposer(self) -> str:
        return self.proposal.proposer

    @property
    def recipe(self) -> str | None:
        return self.proposal.recipe

    @property
    def diff(self) -> str:
        return self.proposal.diff

    @property
    def diff_sha256(self) -> str:
        return self.proposal.diff_sha256 or ""

    @property
    def files(self) -> list[str]:
        return list(self.proposal.files or [])

    @property
    def llm_calls(self) -> list[LlmCall]:
        return list(self.proposal.llm_calls or [])

    @property
    def guard_reasons(self) -> list[str]:
        return list(self.proposal.guard.reasons)

    @property
    def guard_warnings(self) -> list[str]:
        return list(self.proposal.guard.warnings or [])

    def shown(self) -> dict[str, Any]:
        """What ``acklab flow run --json`` says of the proposal."""
        return {
            "id": self.id,
            "proposer": self.proposer,
            "recipe": self.recipe,
            "files": self.files,
            "diff": self.diff,
            "diff_sha256": self.diff_sha256,
        }
