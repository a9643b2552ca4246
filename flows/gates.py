"""The approval gates as checkpoints: ``approve`` (before a proposal is applied) and ``approve-gap``.

A gate asks its decision source and returns what was decided: go on (the decision), another
round (`Revise`, with the approver's feedback), or the end of the flow (`Ended`: rejected, or
refused when no decision could be had). No exception leaves a gate for a decision.
"""

from __future__ import annotations

from typing import Literal

from acklab.evidence.exitcodes import ExitCode

from .approvals import Decision, Question
from .candidate import Candidate
from .context import FlowContext
from .errors import GateRefused
from .state import Ended, Revise

Gate = Literal["approve", "approve-gap"]


def gate(
    ctx: FlowContext, name: Gate, proposal: Candidate, question: str, *, feedback: str | None = None
) -> Decision | Revise | Ended:
    """Ask the gate `name` about `proposal`; the approval, a request for another round (with the
    approver's feedback, else their reason, else `feedback`), or the end of the flow."""
    with ctx.trail.checkpoint(name, inputs={"diff": proposal.diff}, attempt=ctx.attempt(name)) as cp:
        try:
            decision = ctx.config.decisions.decide(
                Question(name, proposal.id, proposal.diff_sha256, question)
            )
        except GateRefused as exc:  # no decision source, or none left: no progress without one
            cp.refuse(str(exc))
            return Ended("refused", str(exc), int(ExitCode.REFUSED), proposal)
        cp.decision = decision
        cp.outputs = {"proposal": proposal.id, "decision": decision.decision}
        delegated = f", delegated by {decision.delegated_by}" if decision.delegated_by else ""
        ctx.say(f"{name}: {decision.decision} by {decision.actor}{delegated} ({decision.source})")
        if decision.decision == "reject":
            why = f"{decision.actor} rejected {proposal.id} at the {name} gate" + (
                f": {decision.reason}" if decision.reason else ""
            )
            cp.refuse(why)
            return Ended("rejected", why, int(ExitCode.REFUSED), proposal)
    if decision.decision == "modify":
        return Revise(decision.feedback or decision.reason or feedback)
    return decision
