"""The flow: reproduce → propose → approve → apply → verify → strike-again → publish.

Everything after reproduce happens in worktrees of the expected head; the caller's checkout
is never modified. Every checkpoint is recorded in the trail. Each takes the stage before
it and returns the next (`flows.state`) or how the flow ended, and this module only chains
them: `flows.head` (reproduce, propose), `flows.gates` (approve, approve-gap),
`flows.patched` (apply, verify, strike-again, publish). The outcome maps onto the exit
codes: 0 published/applied/not-needed/proposed, 1 the patch did not hold (verify failed),
3 invalid input, 4 the lab could not run, 5 a gate refused (scope, approval, moved head),
6 interrupted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from acklab.evidence.exitcodes import ExitCode
from acklab.harness.procs.leases import leasing
from acklab.harness.targets.templates import keeping

from . import guard, report, tools
from .context import FlowConfig, FlowContext
from .errors import FlowError
from .gates import gate
from .head import propose, reproduce
from .patched import after_approval
from .state import Ended, Proposed, Reproduced, Revise, Started, guarded
from .trail import Trail
from .worktree import head_sha, worktree

__all__ = ["FlowConfig", "FlowResult", "run_flow"]


@dataclass(frozen=True)
class FlowResult:
    """How one flow run ended, and where its trail is."""

    run_id: str
    outcome: str
    exit_code: int
    detail: str
    bundle: Path
    published: dict[str, Any] | None = None
    summary: list[str] = field(default_factory=list)
    proposal: dict[str, Any] | None = None


def run_flow(config: FlowConfig) -> FlowResult:
    """Run the flow once; always finishes the trail, whatever happens."""
    trail = Trail(spec=config.spec, out=config.out, secrets=config.secrets)
    try:
        # Worktrees and everything the lab starts are leased in the journal: a flow killed
        # with kill -9 leaves nothing that `acklab janitor --out` cannot find and remove.
        # Each checkout's setup runs once for the whole flow (its template: harness.targets.templates).
        with leasing(config.out, trail.run_id, secrets=config.secrets), keeping():
            ended = guarded(None, lambda: _drive(FlowContext.of(config, trail)))
    except Exception as exc:
        trail.finish(outcome="error", detail=f"internal error: {exc!r}", exit_code=int(ExitCode.LAB_ERROR))
        raise
    bundle = trail.finish(outcome=ended.outcome, detail=ended.detail, exit_code=ended.exit_code)
    return FlowResult(
        trail.run_id,
        ended.outcome,
        ended.exit_code,
        ended.detail,
        bundle,
        dict(ended.published) if ended.published is not None else None,
        list(ended.summary),
        ended.proposal.shown() if ended.proposal is not None else None,
    )


def _drive(ctx: FlowContext) -> Ended:
    """The head checked and checked out, then the rounds of proposals on it."""
    config = ctx.config
    expected = guarded(None, _preflight, ctx)
    if isinstance(expected, Ended):
        return expected
    with worktree(config.repo, expected, label="head") as head:
        started = Started(expected=expected, head=head, source=head.read(ctx.handler))
        reproduced = guarded(started, reproduce, ctx, started)
        if isinstance(reproduced, Ended):
            return reproduced
        return _rounds(ctx, reproduced)


def _preflight(ctx: FlowContext) -> str | Ended:
    """The expected head, and the refusals that come before anything is read or proposed."""
    config = ctx.config
    expected = config.expected_head or head_sha(config.repo)
    # Before anything reads the handler: a symlinked file or folder would lead every read
    # (the prompt, the guard, the publish) somewhere else.
    ctx.trail.expect_head(expected)
    problem = guard.head_path_problem(config.repo, expected, ctx.handler)
    if problem:
        return Ended("refused", f"refused before proposing: {problem}", int(ExitCode.REFUSED))
    # Before the lab runs or a model is asked: a tool missing would waste both.
    missing = tools.missing(ctx.spec, verifying=not config.propose_only)
    if missing:
        raise FlowError(
            f"the flow cannot run its tools, so nothing was reproduced or proposed: {'; '.join(missing)}"
        )
    merge_request = config.publisher.precheck(expected)
    if merge_request:
        ctx.trail.publishing_to(merge_request)
    return expected


def _rounds(ctx: FlowContext, reproduced: Reproduced) -> Ended:
    """Propose, approve, then apply and what follows; a `modify` decision starts another round."""
    spec, config = ctx.spec, ctx.config
    feedback: str | None = None
    for _round in range(spec.max_rounds):
        candidate = guarded(reproduced, propose, ctx, reproduced, feedback)
        if isinstance(candidate, Ended):
            return candidate
        proposed = Proposed.grown(reproduced, candidate=candidate)
        if config.propose_only:
            detail = (
                f"proposed {candidate.id} (diff sha256 {candidate.diff_sha256[:12]}); stopped before approve"
            )
            ctx.skip_rest("propose", "--propose-only: stopped before the approve gate")
            return Ended("proposed", detail, 0, candidate)
        question = report.approve_question(
            candidate,
            list(reproduced.failing),
            reproduced.expected,
            sandbox=ctx.sandbox.describe(),
            unsandboxed=ctx.sandbox.unsandboxed,
        )
        decided = guarded(proposed, gate, ctx, "approve", candidate, question)
        if isinstance(decided, Ended):
            return decided
        if isinstance(decided, Revise):
            feedback = decided.feedback
            continue
        ended = guarded(proposed, _patched, ctx, proposed)
        if isinstance(ended, Ended):
            return ended
        feedback = ended.feedback
    return Ended(
        "refused",
        f"no proposal was approved within {spec.max_rounds} rounds (max_rounds in {spec.path})",
        int(ExitCode.REFUSED),
    )


def _patched(ctx: FlowContext, proposed: Proposed) -> Ended | Revise:
    with worktree(ctx.config.repo, proposed.expected, label="patched") as patched:
        return after_approval(ctx, proposed, patched)
