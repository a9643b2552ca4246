"""The flow: reproduce → propose → approve → apply → verify → strike-again → publish.

Everything after reproduce happens in worktrees of the expected head; the caller's checkout
is never modified. Every checkpoint is recorded in the trail; the outcome maps onto the exit
codes: 0 published/applied/not-needed, 1 the patch did not hold (verify failed), 3 invalid
input, 4 the lab could not run, 5 a gate refused (scope, approval, moved head), 6 interrupted.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from acklab.evidence.exitcodes import AcklabError, ExitCode
from acklab.harness.procs.leases import leasing

from . import guard, report
from .approvals import Decision, DecisionSource, Question
from .checks import options_for_gaps, run_checks
from .diffs import sha256_text
from .errors import DecisionRejected, FlowError, GateRefused, ScopeRefused
from .escape import one_line, visible
from .lab import LabRun, run_lab
from .proposers import Proposal, ProposalRequest, Proposer
from .publish import Publisher
from .spec import FlowSpec
from .trail import Trail
from .worktree import Worktree, head_sha, worktree


def _stderr(message: str) -> None:
    sys.stderr.write(f"flow: {message}\n")
    sys.stderr.flush()


def _escaped(echo: Callable[[str], None]) -> Callable[[str], None]:
    # Progress lines quote proposals, guard reasons, actors: no control character reaches a terminal.
    return lambda message: echo(visible(message))


@dataclass
class FlowConfig:
    """What one flow run needs; the CLI builds it from flags, tests build it directly."""

    repo: Path
    spec: FlowSpec
    out: Path
    proposer: Proposer
    decisions: DecisionSource
    publisher: Publisher
    secrets: list[str] = field(default_factory=list)
    echo: Callable[[str], None] = _stderr
    propose_only: bool = False


@dataclass(frozen=True)
class FlowResult:
    run_id: str
    outcome: str
    exit_code: int
    detail: str
    bundle: Path
    published: dict[str, Any] | None = None
    summary: list[str] = field(default_factory=list)
    proposal: dict[str, Any] | None = None


class _Stop(Exception):
    """Ends the flow with an outcome (control flow, not an error)."""

    def __init__(self, outcome: str, detail: str, exit_code: int) -> None:
        super().__init__(detail)
        self.outcome, self.detail, self.exit_code = outcome, detail, exit_code


def run_flow(config: FlowConfig) -> FlowResult:
    """Run the flow once; always finishes the trail, whatever happens."""
    trail = Trail(spec=config.spec, out=config.out, secrets=config.secrets)
    flow = _Flow(config, trail)
    try:
        # Worktrees and everything the lab starts are leased in the journal: a flow killed
        # with kill -9 leaves nothing that `acklab janitor --out` cannot find and remove.
        with leasing(config.out, trail.run_id, secrets=config.secrets):
            flow.run()
        raise AssertionError("the flow ended without an outcome")  # pragma: no cover
    except _Stop as stop:
        outcome, detail, code = stop.outcome, stop.detail, stop.exit_code
    except DecisionRejected as exc:
        outcome, detail, code = "rejected", str(exc), int(ExitCode.REFUSED)
    except GateRefused as exc:
        outcome, detail, code = "refused", str(exc), int(ExitCode.REFUSED)
    except AcklabError as exc:
        outcome, detail, code = "error", str(exc), int(exc.exit_code)
    except KeyboardInterrupt:
        outcome, detail, code = "interrupted", "interrupted by the user", int(ExitCode.INTERRUPTED)
    except Exception as exc:
        trail.finish(outcome="error", detail=f"internal error: {exc!r}", exit_code=int(ExitCode.LAB_ERROR))
        raise
    bundle = trail.finish(outcome=outcome, detail=detail, exit_code=code)
    return FlowResult(
        trail.run_id, outcome, code, detail, bundle, flow.published, flow.summary, flow.proposal
    )


class _Flow:
    def __init__(self, config: FlowConfig, trail: Trail) -> None:
        self.c = config
        self.spec = config.spec
        self.trail = trail
        self.say = _escaped(config.echo)
        self.attempts: dict[str, int] = {}
        self.decisions: list[dict[str, Any]] = []
        self.published: dict[str, Any] | None = None
        self.proposal: dict[str, Any] | None = None
        self.summary: list[str] = []
        scoped = self.spec.scoped_files()
        if not scoped:
            raise FlowError(f"{self.spec.path}: the scope allows no single file a proposal could target")
        self.handler = scoped[0]

    def attempt(self, name: str) -> int:
        self.attempts[name] = self.attempts.get(name, 0) + 1
        return self.attempts[name]

    def lab(self, checkout: Worktree, experiments: tuple[str, ...] | list[str], why: str) -> LabRun:
        self.say(f"{why}: {', '.join(experiments)} x{self.spec.trials} on {checkout.path} ...")
        run = run_lab(
            checkout.path,
            target=self.spec.target,
            experiments=list(experiments),
            trials=self.spec.trials,
            seed=self.spec.seed,
            out=self.c.out,
            secrets=self.c.secrets,
        )
        for exp in run.experiments.values():
            self.say(f"  {exp.line()}")
        if run.errored() or not run.experiments:
            problems = [run.experiments[n].line() for n in run.errored()]
            if run.error:
                problems.append(run.error)
            raise FlowError(f"the lab could not run ({why}): {'; '.join(problems) or 'no experiments ran'}")
        return run

    def skip_rest(self, after: str, why: str) -> None:
        names = list(self.spec.checkpoints)
        for name in names[names.index(after) + 1 :]:
            self.trail.skipped(name, why)

    def run(self) -> None:
        repo, spec = self.c.repo, self.spec
        self.expected = head_sha(repo)
        self.trail.set(expected_head_sha=self.expected)
        # Before anything reads the handler: a symlinked file or folder would lead every read
        # (the prompt, the guard, the publish) somewhere else.
        problem = guard.head_path_problem(repo, self.expected, self.handler)
        if problem:
            raise GateRefused(f"refused before proposing: {problem}")
        mr = self.c.publisher.precheck(self.expected)
        if mr:
            self.trail.set(merge_request=mr)
        with worktree(repo, self.expected, label="head") as head:
            self.head = head
            self.source = head.read(self.handler)
            with self.trail.checkpoint(
                "reproduce", inputs={self.handler: self.source, "flow-spec": spec.sha256 or spec.name}
            ) as cp:
                self.repro = self.lab(head, spec.reproduce, "reproduce")
                cp.outputs = report.run_outputs(self.repro, self.c.out) | {
                    "expected_head_sha": self.expected,
                    "failing": self.repro.failing(),
                }
            failing = self.repro.failing()
            if not failing:
                detail = f"nothing to repair: {', '.join(spec.reproduce)} pass at {self.expected[:12]}"
                self.skip_rest("reproduce", detail)
                raise _Stop("not-needed", detail, 0)
            self.failing = failing
            self.incident = report.incident_summary(self.repro)
            feedback: str | None = None
            for _round in range(spec.max_rounds):
                proposal = self.propose(feedback)
                self.proposal = {
                    k: proposal[k] for k in ("id", "proposer", "recipe", "files", "diff", "diff_sha256")
                }
                if self.c.propose_only:
                    detail = f"proposed {proposal['id']} (diff sha256 {proposal['diff_sha256'][:12]}); stopped before approve"
                    self.skip_rest("propose", "--propose-only: stopped before the approve gate")
                    raise _Stop("proposed", detail, 0)
                decision = self.gate(
                    "approve", proposal, report.approve_question(proposal, self.failing, self.expected)
                )
                if decision.decision == "modify":
                    feedback = decision.feedback or decision.reason
                    continue
                with worktree(repo, self.expected, label="patched") as patched:
                    feedback = self.after_approval(proposal, patched)
            raise GateRefused(
                f"no proposal was approved within {spec.max_rounds} rounds (max_rounds in {spec.path})"
            )

    def request(self, feedback: str | None) -> ProposalRequest:
        return ProposalRequest(
            handler_path=self.handler,
            handler_source=self.source,
            incident_summary=self.incident,
            failing_experiments=tuple(self.failing),
            scope=self.spec.scope,
            limits=self.spec.limits,
            feedback=feedback,
        )

    def propose(self, feedback: str | None) -> dict[str, Any]:
        reasons: tuple[str, ...] = ()
        request = self.request(feedback)
        inputs: dict[str, str] = {self.handler: self.source, "incident": self.incident}
        if feedback:
            inputs["feedback"] = feedback
        for attempt in range(1, self.spec.retries + 2):
            number = self.attempt("propose")
            with self.trail.checkpoint("propose", inputs=inputs, attempt=number) as cp:
                proposal = self.c.proposer.propose(
                    replace(request, attempt=attempt, rejection_reasons=reasons)
                )
                doc = self.judge(proposal, f"p{number}")
                cp.outputs = {
                    "proposal": doc["id"],
                    "proposer": doc["proposer"],
                    "allowed": doc["guard"]["allowed"],
                    "reasons": doc["guard"]["reasons"],
                    "llm_calls": len(doc["llm_calls"]),
                    "rationale": visible(proposal.rationale)[:2000],
                }
                if doc["guard"]["allowed"]:
                    self.say(f"propose: {doc['id']} by {doc['proposer']} passed the scope guard")
                    return doc
                cp.status, cp.error = "refused", "; ".join(doc["guard"]["reasons"])
            self.say(f"propose: {doc['id']} rejected by the scope guard: {cp.error}")
            reasons = tuple(doc["guard"]["reasons"])
        raise ScopeRefused(
            f"the scope guard rejected the proposal and its retry: {'; '.join(reasons)}",
            reasons=list(reasons),
        )

    def judge(self, proposal: Proposal, proposal_id: str) -> dict[str, Any]:
        if proposal.problems:
            verdict = guard.GuardResult(False, list(proposal.problems))
        else:
            verdict = guard.check(proposal.diff, spec=self.spec, repo=self.c.repo, commit=self.expected)
        doc: dict[str, Any] = {
            "id": proposal_id,
            "proposer": proposal.proposer,
            "recipe": proposal.recipe,
            "diff": proposal.diff,
            "diff_sha256": sha256_text(proposal.diff),
            "files": verdict.files,
            "guard": verdict.as_dict(),
            "llm_calls": [call.as_dict() | {"model": one_line(call.model)} for call in proposal.llm_calls],
        }
        self.trail.add_proposal(doc)
        return doc | {"changed_lines": verdict.changed_lines, "rationale": proposal.rationale}

    def gate(self, gate: str, proposal: dict[str, Any], summary: str) -> Decision:
        with self.trail.checkpoint(gate, inputs={"diff": proposal["diff"]}, attempt=self.attempt(gate)) as cp:
            decision = self.c.decisions.decide(
                Question(gate, proposal["id"], proposal["diff_sha256"], summary)
            )
            cp.decision = decision
            cp.outputs = {"proposal": proposal["id"], "decision": decision.decision}
            self.decisions.append({"gate": gate, **decision.as_trail()})
            delegated = f", delegated by {decision.delegated_by}" if decision.delegated_by else ""
            self.say(f"{gate}: {decision.decision} by {decision.actor}{delegated} ({decision.source})")
            if decision.decision == "reject":
                raise DecisionRejected(
                    f"{decision.actor} rejected {proposal['id']} at the {gate} gate"
                    + (f": {decision.reason}" if decision.reason else "")
                )
        return decision

    def after_approval(self, proposal: dict[str, Any], patched: Worktree) -> str:
        """apply, verify, strike-again, publish; returns feedback when a decision asks for another round."""
        with self.trail.checkpoint(
            "apply",
            inputs={"diff": proposal["diff"], self.handler: self.source},
            attempt=self.attempt("apply"),
        ) as cp:
            patched.apply(proposal["diff"])
            changed = patched.changed_files()
            if changed != sorted(proposal["files"]):
                raise GateRefused(f"applying {proposal['id']} changed {changed}, not {proposal['files']}")
            self.patched_source = patched.read(self.handler)
            cp.outputs = {"files": changed, "worktree_base": self.expected, "isolated": True}
        self.verify_run, checks = self.verify(patched)
        comparisons = self.strike_again(patched, proposal)
        gaps = [c for c in comparisons if c.status != "held"]
        if gaps:
            options = options_for_gaps(self, proposal, comparisons)
            self.trail.doc["checkpoints"][-1]["outputs"]["options"] = options
            question = report.gap_question(comparisons, options)
            decision = self.gate("approve-gap", proposal, question)
            if decision.decision == "modify":
                return decision.feedback or decision.reason or "close the gaps strike-again found"
        self.publish(patched, proposal, checks, comparisons)
        raise AssertionError("publish always stops the flow")  # pragma: no cover

    def verify(self, patched: Worktree) -> tuple[LabRun, list[dict[str, Any]]]:
        with self.trail.checkpoint(
            "verify", inputs={self.handler: self.patched_source}, attempt=self.attempt("verify")
        ) as cp:
            run = self.lab(patched, self.failing, "verify")
            checks = run_checks(self.spec, patched, self.trail, self.say, head=self.head)
            still = run.failing()
            bad = [c["name"] for c in checks if c["status"] != "ok"]
            cp.outputs = report.run_outputs(run, self.c.out) | {
                "checks": checks,
                "handler_module": run.handler_module,
            }
            if still or bad:
                cp.status = "failed"
                cp.error = (f"still failing: {', '.join(still)}. " if still else "") + (
                    f"checks failed: {', '.join(bad)}" if bad else ""
                )
        if still or bad:
            self.skip_rest("verify", f"verify failed: {cp.error}")
            raise _Stop("failed", f"the patch did not hold: {cp.error}", int(ExitCode.VERDICT_FAILED))
        self.summary += [
            f"{n}: {self.repro.experiments[n].verdict} at head -> {run.experiments[n].verdict} patched"
            for n in self.failing
        ]
        return run, checks

    def strike_again(self, patched: Worktree, proposal: dict[str, Any]) -> list[report.Comparison]:
        if not (self.spec.has("strike-again") and self.spec.strike_again):
            if self.spec.has("strike-again"):
                self.trail.skipped("strike-again", "the spec lists no strike_again experiments")
            return []
        with self.trail.checkpoint(
            "strike-again", inputs={self.handler: self.patched_source}, attempt=self.attempt("strike-again")
        ) as cp:
            self.before = self.lab(self.head, self.spec.strike_again, "strike-again (head)")
            after = self.lab(patched, self.spec.strike_again, "strike-again (patched)")
            comparisons = report.compare(self.before, after)
            gaps = [c.experiment for c in comparisons if c.status != "held"]
            cp.outputs = {
                "experiments": [c.as_dict() for c in comparisons],
                "aimed": [
                    report.Comparison(n, self.repro.experiments[n], self.verify_run.experiments[n]).as_dict()
                    for n in self.failing
                ],
                "gaps": gaps,
                "before": report.run_outputs(self.before, self.c.out),
                "after": report.run_outputs(after, self.c.out),
            }
            if gaps:
                cp.status, cp.error = "failed", f"the fix does not hold for {', '.join(gaps)}"
        for c in comparisons:
            self.say(f"strike-again: {c.line()}")
            self.summary.append(
                f"{c.experiment}: strike-again {c.status} ({c.before.verdict if c.before else '-'} -> {c.after.verdict})"
            )
        return comparisons

    def publish(
        self,
        patched: Worktree,
        proposal: dict[str, Any],
        checks: list[dict[str, Any]],
        comparisons: list[report.Comparison],
    ) -> None:
        if self.c.publisher.name == "none":
            detail = "verified; not published (neither --local nor --mr); the patch is in the trail"
            self.trail.skipped("publish", detail)
            raise _Stop("applied", detail, 0)
        bundle_rel = report.relative(self.trail.bundle, self.c.repo)
        note = report.mr_note(
            run_id=self.trail.run_id,
            proposal=proposal,
            decisions=self.decisions,
            reproduce=self.repro,
            verify=self.verify_run,
            checks=checks,
            comparisons=comparisons,
            bundle_rel=bundle_rel,
        )
        message = report.commit_message(
            handler=self.handler,
            proposal=proposal,
            run_id=self.trail.run_id,
            failing=self.failing,
            expected=self.expected,
            decisions=self.decisions,
            bundle_rel=bundle_rel,
        )
        with self.trail.checkpoint(
            "publish", inputs={self.handler: self.patched_source, "diff": proposal["diff"]}
        ) as cp:
            self.published = self.c.publisher.publish(
                patched,
                run_id=self.trail.run_id,
                expected_sha=self.expected,
                paths=proposal["files"],
                message=message,
                note=note,
            )
            cp.outputs = dict(self.published)
        where = self.published.get("branch")
        raise _Stop(
            "published", f"published {proposal['id']} to {where} as {self.published['commit'][:12]}", 0
        )
