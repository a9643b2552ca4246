"""The checkpoints on the patched worktree: apply, verify, strike again, publish.

Each takes the stage before it and returns the next one (`flows.state`) or how the flow
ended; `after_approval` runs them in order for one approved proposal.
"""

from __future__ import annotations

from acklab.evidence.exitcodes import ExitCode

from . import report
from .checks import options_for_gaps, run_checks
from .context import FlowContext
from .errors import GateRefused
from .gates import gate
from .state import Applied, Ended, Proposed, Revise, Struck, Verified, guarded
from .worktree import Worktree


def after_approval(ctx: FlowContext, approved: Proposed, patched: Worktree) -> Ended | Revise:
    """apply, verify, strike-again, the gap's gate, publish: how the flow ends, or another round."""
    applied = guarded(approved, apply, ctx, approved, patched)
    if isinstance(applied, Ended):
        return applied
    verified = guarded(applied, verify, ctx, applied)
    if isinstance(verified, Ended):
        return verified
    struck = guarded(verified, strike_again, ctx, verified)
    if isinstance(struck, Ended):
        return struck
    if struck.gaps:
        question = report.gap_question(list(struck.comparisons), [dict(o) for o in struck.options])
        decided = guarded(
            struck,
            gate,
            ctx,
            "approve-gap",
            struck.candidate,
            question,
            feedback="close the gaps strike-again found",
        )
        if isinstance(decided, Ended | Revise):
            return decided
    return guarded(struck, publish, ctx, struck)


def apply(ctx: FlowContext, state: Proposed, patched: Worktree) -> Applied | Ended:
    """Apply the proposal in its worktree; refused when it touches other files than it said."""
    proposal = state.candidate
    with ctx.trail.checkpoint(
        "apply", inputs={"diff": proposal.diff, ctx.handler: state.source}, attempt=ctx.attempt("apply")
    ) as cp:
        patched.apply(proposal.diff)
        changed = patched.changed_files()
        if changed != sorted(proposal.files):
            why = f"applying {proposal.id} changed {changed}, not {proposal.files}"
            cp.refuse(why)
            return Ended("refused", why, int(ExitCode.REFUSED), proposal)
        source = patched.read(ctx.handler)
        cp.outputs = {"files": changed, "worktree_base": state.expected, "isolated": True}
    return Applied.grown(state, patched=patched, patched_source=source)


def verify(ctx: FlowContext, state: Applied) -> Verified | Ended:
    """The aimed experiments on the patch, and every verify check; the patch did not hold otherwise."""
    with ctx.trail.checkpoint(
        "verify", inputs={ctx.handler: state.patched_source}, attempt=ctx.attempt("verify")
    ) as cp:
        run = ctx.lab(state.patched, state.failing, "verify")
        checks = run_checks(ctx.spec, state.patched, ctx.trail, ctx.say, head=state.head)
        still = run.failing()
        bad = [c.name for c in checks if c.status != "ok"]
        cp.outputs = report.run_outputs(run, ctx.config.out).dump() | {
            "checks": [c.dump() for c in checks],
            "handler_module": run.handler_module,
        }
        if still or bad:
            cp.fail(
                (f"still failing: {', '.join(still)}. " if still else "")
                + (f"checks failed: {', '.join(bad)}" if bad else "")
            )
    if still or bad:
        ctx.skip_rest("verify", f"verify failed: {cp.error}")
        return Ended(
            "failed", f"the patch did not hold: {cp.error}", int(ExitCode.VERDICT_FAILED), state.candidate
        )
    summary = tuple(
        f"{n}: {state.repro.experiments[n].verdict} at head -> {run.experiments[n].verdict} patched"
        for n in state.failing
    )
    return Verified.grown(state, verify_run=run, checks=tuple(checks), summary=summary)


def strike_again(ctx: FlowContext, state: Verified) -> Struck:
    """The experiments the patch was not aimed at, on the head and on the patch; for each gap, two
    measured options (`checks.options_for_gaps`)."""
    spec = ctx.spec
    if not (spec.has("strike-again") and spec.strike_again):
        if spec.has("strike-again"):
            ctx.trail.skipped("strike-again", "the spec lists no strike_again experiments")
        return Struck.grown(state, before=None, comparisons=(), options=())
    with ctx.trail.checkpoint(
        "strike-again", inputs={ctx.handler: state.patched_source}, attempt=ctx.attempt("strike-again")
    ) as cp:
        before = ctx.lab(state.head, spec.strike_again, "strike-again (head)")
        after = ctx.lab(state.patched, spec.strike_again, "strike-again (patched)")
        comparisons = report.compare(before, after)
        gaps = [c.experiment for c in comparisons if c.status != "held"]
        cp.outputs = {
            "experiments": [c.record().dump() for c in comparisons],
            "aimed": [
                report.Comparison(n, state.repro.experiments[n], state.verify_run.experiments[n])
                .record()
                .dump()
                for n in state.failing
            ],
            "gaps": gaps,
            "before": report.run_outputs(before, ctx.config.out).dump(),
            "after": report.run_outputs(after, ctx.config.out).dump(),
        }
        options: list[dict[str, object]] = []
        if gaps:
            cp.fail(f"the fix does not hold for {', '.join(gaps)}")
            options = options_for_gaps(
                spec=spec,
                repo=ctx.config.repo,
                expected=state.expected,
                request=ctx.request(state, None),
                proposal=state.candidate,
                baseline={**state.repro.experiments, **before.experiments},
                current={**state.verify_run.experiments, **{c.experiment: c.after for c in comparisons}},
                lab=ctx.lab,
            )
            cp.outputs["options"] = options
    summary = list(state.summary)
    for c in comparisons:
        ctx.say(f"strike-again: {c.line()}")
        summary.append(
            f"{c.experiment}: strike-again {c.status} ({c.before.verdict if c.before else '-'} -> {c.after.verdict})"
        )
    return Struck.grown(
        state, summary=tuple(summary), before=before, comparisons=tuple(comparisons), options=tuple(options)
    )


def publish(ctx: FlowContext, state: Struck) -> Ended:
    """Publish the verified patch (a local branch, the merge request), or leave it in the trail."""
    proposal = state.candidate
    if ctx.config.publisher.name == "none":
        detail = "verified; not published (neither --local nor --mr); the patch is in the trail"
        ctx.trail.skipped("publish", detail)
        return Ended("applied", detail, 0, proposal, summary=state.summary)
    bundle_rel = report.relative(ctx.trail.bundle, ctx.config.repo)
    decisions = [(gate_name, d.as_trail()) for gate_name, d in ctx.trail.decisions()]
    note = report.mr_note(
        run_id=ctx.trail.run_id,
        proposal=proposal,
        decisions=decisions,
        reproduce=state.repro,
        verify=state.verify_run,
        checks=list(state.checks),
        comparisons=list(state.comparisons),
        bundle_rel=bundle_rel,
    )
    message = report.commit_message(
        handler=ctx.handler,
        proposal=proposal,
        run_id=ctx.trail.run_id,
        failing=list(state.failing),
        expected=state.expected,
        decisions=decisions,
        bundle_rel=bundle_rel,
    )
    with ctx.trail.checkpoint(
        "publish", inputs={ctx.handler: state.patched_source, "diff": proposal.diff}
    ) as cp:
        try:
            published = ctx.config.publisher.publish(
                state.patched,
                run_id=ctx.trail.run_id,
                expected_sha=state.expected,
                paths=proposal.files,
                message=message,
                note=note,
            )
        except GateRefused as exc:  # the merge request's head moved: nothing was published
            cp.refuse(str(exc))
            return Ended("refused", str(exc), int(ExitCode.REFUSED), proposal, summary=state.summary)
        cp.outputs = dict(published)
    where = published.get("branch")
    detail = f"published {proposal.id} to {where} as {published['commit'][:12]}"
    return Ended("published", detail, 0, proposal, published, state.summary)
