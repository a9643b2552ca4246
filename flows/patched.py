"""The checkpoints on the patched worktree: apply, verify, strike again, publish.

Each takes the stage before it and returns the next one (`flows.state`) or how the flow
ended; `after_approval` runs them in order for one approved proposal.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from acklab.evidence.exitcodes import ExitCode
from acklab.harness.core.plan import derive

from . import report
from .checks import options_for_gaps, run_checks
from .context import FlowContext
from .errors import GateRefused, PatchTampered
from .gates import gate
from .lab import LabRun, merged
from .state import Applied, Ended, Proposed, Revise, Struck, Verified, guarded
from .worktree import Worktree, worktree


def second_seed(seed: int) -> int:
    """The other seed strike-again attacks with: other ids, amounts, currencies, field orders."""
    return int(derive(seed, "strike-again")[:8], 16)


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
        run = ctx.lab(state.patched, state.failing, "verify", schema_from=state.head)
        checks = run_checks(ctx.spec, state.patched, ctx.trail, ctx.say, head=state.head, sandbox=ctx.sandbox)
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
        seeds = (spec.seed, second_seed(spec.seed))
        befores: list[LabRun] = []
        afters: list[LabRun] = []
        for seed in seeds:
            befores.append(
                ctx.lab(
                    state.head, spec.strike_again, "strike-again (head)", seed=seed, skip_inapplicable=True
                )
            )
            afters.append(
                ctx.lab(
                    state.patched,
                    spec.strike_again,
                    "strike-again (patched)",
                    schema_from=state.head,
                    seed=seed,
                    skip_inapplicable=True,
                )
            )
        # An experiment holds only when it holds under both seeds.
        before, after = merged(befores), merged(afters)
        # One that does not apply to the target (no lifecycle: for out-of-order...) was not judged on
        # either side: it is listed with its reason, neither held nor a gap.
        skipped = {n: e.reason or "skipped" for n, e in after.experiments.items() if e.verdict == "skipped"}
        comparisons = [c for c in report.compare(before, after) if c.experiment not in skipped]
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
            "skipped": [{"experiment": n, "reason": why} for n, why in skipped.items()],
            "before": report.run_outputs(befores[0], ctx.config.out).dump(),
            "after": report.run_outputs(afters[0], ctx.config.out).dump(),
            "seeds": list(seeds),
            "second_seed": {
                "before": report.run_outputs(befores[1], ctx.config.out).dump(),
                "after": report.run_outputs(afters[1], ctx.config.out).dump(),
            },
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
                lab=lambda checkout, names, why: ctx.lab(checkout, names, why, schema_from=state.head),
            )
            cp.outputs["options"] = options
    summary = list(state.summary)
    for name, why in skipped.items():
        ctx.say(f"strike-again: {name}: skipped ({why})")
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
        sandbox=ctx.sandbox.describe() if ctx.sandbox.unsandboxed else None,
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
        # Exactly the approved diff: applied anew to the expected head in a clean worktree, never
        # the verified worktree's file (which must still be what that makes).
        with worktree(ctx.config.repo, state.expected, label="publish") as clean:
            try:
                clean.apply(proposal.diff)
                digests = exactly_approved(clean, state.patched, proposal.files)
                published = ctx.config.publisher.publish(
                    clean,
                    run_id=ctx.trail.run_id,
                    expected_sha=state.expected,
                    paths=proposal.files,
                    message=message,
                    note=note,
                )
            except GateRefused as exc:  # the head moved, or the verified file is not the approved one
                cp.refuse(str(exc))
                return Ended("refused", str(exc), int(ExitCode.REFUSED), proposal, summary=state.summary)
        published = {**published, "sha256": digests}
        cp.outputs = dict(published)
    where = published.get("branch")
    detail = f"published {proposal.id} to {where} as {published['commit'][:12]}"
    return Ended("published", detail, 0, proposal, published, state.summary)


def exactly_approved(clean: Worktree, verified: Worktree, paths: Sequence[str]) -> dict[str, str]:
    """The sha256 of each file the approved diff makes at the expected head (`clean`); PatchTampered
    (exit 5) when the verified worktree's file is not byte for byte the same."""
    if clean.changed_files() != sorted(paths):
        raise PatchTampered(
            f"the approved diff, applied anew at {clean.commit[:12]}, changes {clean.changed_files()}, "
            f"not {sorted(paths)}; nothing was published"
        )
    digests = {}
    for path in paths:
        made = (clean.path / path).read_bytes()
        if (verified.path / path).read_bytes() != made:
            raise PatchTampered(
                f"{path} in the verified worktree is not what the approved diff makes at {clean.commit[:12]} "
                "(it changed after it was applied); nothing was published"
            )
        digests[path] = hashlib.sha256(made).hexdigest()
    return digests
