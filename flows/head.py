"""The checkpoints on the expected head: reproduce the failure, then propose a patch for it.

Each takes the stage before it and returns the next one (`flows.state`) or how the flow ended.
"""

from __future__ import annotations

from dataclasses import replace

from acklab.evidence.documents.trail import Guard, LlmCall, Proposal

from . import guard, report
from .candidate import Candidate
from .context import FlowContext
from .diffs import sha256_text
from .escape import one_line, visible
from .proposers import Proposal as Proposed
from .state import Ended, Reproduced, Started


def reproduce(ctx: FlowContext, start: Started) -> Reproduced | Ended:
    """Run the reproduce experiments on the head; nothing to repair when none fails."""
    spec = ctx.spec
    with ctx.trail.checkpoint(
        "reproduce", inputs={ctx.handler: start.source, "flow-spec": spec.sha256 or spec.name}
    ) as cp:
        repro = ctx.lab(start.head, spec.reproduce, "reproduce")
        failing = repro.failing()
        cp.outputs = report.run_outputs(repro, ctx.config.out).dump() | {
            "expected_head_sha": start.expected,
            "failing": failing,
        }
    if not failing:
        detail = f"nothing to repair: {', '.join(spec.reproduce)} pass at {start.expected[:12]}"
        ctx.skip_rest("reproduce", detail)
        return Ended("not-needed", detail, 0)
    return Reproduced.grown(
        start, repro=repro, failing=tuple(failing), incident=report.incident_summary(repro)
    )


def propose(ctx: FlowContext, state: Reproduced, feedback: str | None) -> Candidate | Ended:
    """Ask the proposer, and once more with the guard's reasons if it refused; refused after that."""
    reasons: tuple[str, ...] = ()
    request = ctx.request(state, feedback)
    inputs: dict[str, str] = {ctx.handler: state.source, "incident": state.incident}
    if feedback:
        inputs["feedback"] = feedback
    for attempt in range(1, ctx.spec.retries + 2):
        number = ctx.attempt("propose")
        with ctx.trail.checkpoint("propose", inputs=inputs, attempt=number) as cp:
            proposed = ctx.config.proposer.propose(
                replace(request, attempt=attempt, rejection_reasons=reasons)
            )
            candidate = judge(ctx, state, proposed, f"p{number}")
            record = candidate.proposal
            cp.outputs = {
                "proposal": record.id,
                "proposer": record.proposer,
                "allowed": record.guard.allowed,
                "reasons": record.guard.reasons,
                "llm_calls": len(record.llm_calls or []),
                "rationale": visible(proposed.rationale)[:2000],
            }
            if record.guard.allowed:
                ctx.say(f"propose: {record.id} by {record.proposer} passed the scope guard")
                return candidate
            cp.refuse("; ".join(record.guard.reasons))
        ctx.say(f"propose: {record.id} rejected by the scope guard: {cp.error}")
        reasons = tuple(record.guard.reasons)
    return Ended("refused", f"the scope guard rejected the proposal and its retry: {'; '.join(reasons)}", 5)


def judge(ctx: FlowContext, state: Reproduced, proposed: Proposed, proposal_id: str) -> Candidate:
    """What the scope guard says of a proposal, recorded in the trail either way."""
    if proposed.problems:
        verdict = guard.GuardResult(False, list(proposed.problems))
    else:
        verdict = guard.check(proposed.diff, spec=ctx.spec, repo=ctx.config.repo, commit=state.expected)
    record = Proposal(
        id=proposal_id,
        proposer=proposed.proposer,  # type: ignore[arg-type]  # recipe or llm, checked by the model
        recipe=proposed.recipe,
        diff=proposed.diff,
        diff_sha256=sha256_text(proposed.diff),
        files=verdict.files,
        guard=Guard(
            allowed=verdict.allowed, reasons=list(verdict.reasons), warnings=list(verdict.warnings) or None
        ),
        llm_calls=[
            LlmCall(
                model=one_line(call.model),
                prompt_tokens=call.prompt_tokens,
                completion_tokens=call.completion_tokens,
                latency_ms=call.latency_ms,
                error=call.error,
            )
            for call in proposed.llm_calls
        ],
    )
    ctx.trail.add_proposal(record)
    return Candidate(record, verdict.changed_lines, proposed.rationale)
