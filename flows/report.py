"""What the flow tells people: incident summaries, strike-again comparisons, gap options, the MR note.

Where strike-again finds a gap, two options are laid out with their measured gain and cost
and neither is recommended: the approver decides, and the decision is recorded.

What a proposal, a model or a decisions file says is escaped here (`escape`): the approver
sees the diff with line numbers and every control character as a visible escape; the MR
note quotes actors and reasons as inline code; the commit message quotes them on one line.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from acklab.evidence.documents.records import observed_text
from acklab.evidence.documents.trail import CheckRecord, Decision, LabLatency, LabRunOutputs, StrikeComparison

from .candidate import Candidate
from .escape import hidden_count, md_code, numbered, one_line, quoted, visible
from .lab import ExperimentResult, LabRun

Decided = tuple[str, Decision]  # (gate, the decision as the trail records it)

BOUNDARY = (
    "acklab proves at-most-once effects in the handler's own database under the faults it ran; "
    "it does not claim exactly-once delivery across systems."
)


def incident_summary(run: LabRun, *, limit: int = 40) -> str:
    """The failing experiments, their first violations (invariant, event, which delivery caused the
    extra effect), and the deliveries of the first failing trial with the handler's answers."""
    lines: list[str] = []
    for name in run.failing():
        exp = run.experiments[name]
        lines.append(f"{name}: {exp.verdict}, {len(exp.violations)} violation(s) in {exp.trials} trial(s)")
        for v in exp.violations[:3]:
            lines.append(
                f"  - {v.invariant}: event {v.event_id} {observed_text(v.observed, v.source, v.expected)} "
                f"({v.detail[:300]})"
            )
        if exp.incident and exp.violations:
            lines += deliveries_of(Path(exp.incident), exp.violations[0].event_id)
    return "\n".join(visible(line) for line in lines[:limit]) or "(no violations recorded)"


def deliveries_of(incident: Path, event_id: str, *, limit: int = 8) -> list[str]:
    """The deliveries of `event_id` in its first failing trial of `incident`, one line each: what was
    sent (attempt, kind, fault) and what the handler answered (status, the start of its body)."""
    from acklab.evidence.documents.incident import Incident
    from acklab.evidence.errors import EvidenceError
    from acklab.evidence.loading import load_evidence_json

    try:
        doc = Incident.read(load_evidence_json(incident), what=str(incident))
    except (OSError, EvidenceError):
        return []
    for trial in doc.trials:
        if trial.verdict != "fail" or event_id not in trial.event_ids:
            continue
        lines = [f"  deliveries of {event_id} (trial {trial.trial_id}):"]
        for d in [d for d in trial.deliveries if d.event_id == event_id][:limit]:
            answer = f"answered {d.status}" if d.status is not None else f"no answer ({d.error or 'none'})"
            excerpt = one_line(d.response_excerpt or "", limit=120)
            sender = f", the sender saw {d.sender_status}" if d.sender_status not in (None, d.status) else ""
            lines.append(
                f"    attempt {d.attempt} ({d.kind}, fault {d.fault}): the handler {answer} {excerpt}{sender}"
            )
        counts = [f"{o.note} {o.effects}" for o in trial.observations if o.event_id == event_id][:6]
        if counts:
            lines.append(f"    effects counted: {', '.join(counts)}")
        return lines
    return []


def _latency_text(latency: LabLatency | None) -> str:
    return f"p50 {latency.p50_ms:.1f} ms / p95 {latency.p95_ms:.1f} ms" if latency else "no latency recorded"


@dataclass(frozen=True)
class Comparison:
    """One experiment before and after the patch."""

    experiment: str
    before: ExperimentResult | None
    after: ExperimentResult

    @property
    def status(self) -> Literal["held", "gap", "regression"]:
        if self.after.verdict == "pass":
            return "held"
        if self.before is not None and self.before.verdict == "pass":
            return "regression"
        return "gap"

    def record(self) -> StrikeComparison:
        """What the trail records of it."""
        return StrikeComparison(
            experiment=self.experiment,
            status=self.status,
            before=self.before.verdict if self.before else None,
            after=self.after.verdict,
            violations_after=len(self.after.violations),
            latency_before=self.before.latency if self.before else None,
            latency_after=self.after.latency,
        )

    def line(self) -> str:
        before = self.before.verdict if self.before else "not run"
        before_latency = self.before.latency if self.before else None
        return (
            f"{self.experiment}: {self.status} (before {before}, after {self.after.verdict}; "
            f"latency before {_latency_text(before_latency)}, after {_latency_text(self.after.latency)})"
        )


def compare(before: LabRun | None, after: LabRun) -> list[Comparison]:
    return [
        Comparison(experiment=name, before=before.experiments.get(name) if before else None, after=result)
        for name, result in after.experiments.items()
    ]


def measure_option(
    *,
    key: str,
    title: str,
    results: dict[str, ExperimentResult],
    baseline: dict[str, ExperimentResult],
    changed_lines: int,
    note: str,
) -> dict[str, Any]:
    """One option's measured gain (experiments it makes pass) and cost (what still fails, latency, size)."""
    fixed = sorted(n for n, r in results.items() if r.verdict == "pass" and baseline[n].verdict != "pass")
    still = sorted(n for n, r in results.items() if r.verdict != "pass")
    deltas = {}
    for name, result in results.items():
        old, new = baseline[name].latency, result.latency
        if old and new:
            deltas[name] = {
                "p50_ms": round(new.p50_ms - old.p50_ms, 3),
                "p95_ms": round(new.p95_ms - old.p95_ms, 3),
            }
    return {
        "option": key,
        "title": title,
        "gain": {
            "experiments_fixed": fixed,
            "passing": sorted(n for n, r in results.items() if r.verdict == "pass"),
        },
        "cost": {
            "experiments_still_failing": still,
            "latency_delta_vs_head": deltas,
            "changed_lines": changed_lines,
        },
        "note": note,
    }


def option_text(option: dict[str, Any]) -> str:
    gain, cost = option["gain"], option["cost"]
    deltas = "; ".join(
        f"{n} p50 {d['p50_ms']:+.1f} ms, p95 {d['p95_ms']:+.1f} ms"
        for n, d in sorted(cost["latency_delta_vs_head"].items())
    )
    return (
        f"option {option['option']}: {option['title']}\n"
        f"    gain: fixes {', '.join(gain['experiments_fixed']) or 'nothing'}\n"
        f"    cost: still failing {', '.join(cost['experiments_still_failing']) or 'nothing'}; "
        f"{cost['changed_lines']} changed lines; latency vs head: {deltas or 'not measured'}\n"
        f"    {option['note']}"
    )


def gap_question(comparisons: list[Comparison], options: list[dict[str, Any]]) -> str:
    gaps = [c for c in comparisons if c.status != "held"]
    lines = ["strike-again found gaps the patch does not close:"]
    lines += [f"  {c.line()}" for c in gaps]
    lines.append("two options, measured; acklab recommends neither:")
    lines += [f"  {option_text(o)}" for o in options]
    lines.append(
        "approve = publish this patch knowing the gaps; reject = publish nothing; modify = ask again"
    )
    return "\n".join(lines)


def evidence_link(bundle_rel: str) -> str:
    """A link to the bundle: the job's artifacts in a pipeline, the path otherwise."""
    job_url = os.environ.get("CI_JOB_URL")
    return f"{job_url}/artifacts/browse/{bundle_rel}/" if job_url else bundle_rel


def mr_note(
    *,
    run_id: str,
    proposal: Candidate,
    decisions: list[Decided],
    reproduce: LabRun,
    verify: LabRun,
    checks: list[CheckRecord],
    comparisons: list[Comparison],
    bundle_rel: str,
    sandbox: str | None = None,
) -> str:
    """The MR note: what was repaired, by whom approved, every verdict, and where the evidence is.

    `sandbox`: said in bold when the code under repair ran unsandboxed (its description).
    """
    who = proposal.recipe or "llm"
    lines = [
        f"### acklab repair flow `{run_id}`",
        "",
        *([f"**Warning: {sandbox}.**", ""] if sandbox else []),
        f"Patch to {', '.join(f'`{f}`' for f in proposal.files)} proposed by "
        f"**{proposal.proposer}** (`{who}`), diff sha256 `{proposal.diff_sha256[:12]}`.",
        "",
        "| gate | decision | actor | delegated by | source |",
        "| --- | --- | --- | --- | --- |",
    ]
    lines[-2:] = [
        "| gate | decision | actor | delegated by | source | reason |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    # Actors, delegations and reasons come from a decisions file or a terminal: quoted as
    # inline code, no quick action (/merge), link, mention or reference in them is interpreted.
    lines += [
        f"| {gate} | {d.decision} | {md_code(d.actor)} | "
        f"{md_code(d.delegated_by) if d.delegated_by else '-'} | {d.source} | "
        f"{md_code(d.reason) if d.reason else '-'} |"
        for gate, d in decisions
    ]
    lines += ["", "| experiment | head | patched | latency head → patched |", "| --- | --- | --- | --- |"]
    for name, before in reproduce.experiments.items():
        after = verify.experiments.get(name)
        if after is not None:
            lines.append(
                f"| {name} | {before.verdict} | {after.verdict} | "
                f"{_latency_text(before.latency)} → {_latency_text(after.latency)} |"
            )
    for c in comparisons:
        before_latency = c.before.latency if c.before else None
        lines.append(
            f"| {c.experiment} (strike-again: {c.status}) | {c.before.verdict if c.before else '-'} | "
            f"{c.after.verdict} | {_latency_text(before_latency)} → {_latency_text(c.after.latency)} |"
        )
    lines += [
        "",
        "Checks in the patched worktree: " + ", ".join(f"{c.name} {c.status}" for c in checks),
    ]
    lines += ["", f"Evidence: {evidence_link(bundle_rel)} (trail.json)", "", f"_{BOUNDARY}_"]
    return "\n".join(lines)


def approve_question(
    proposal: Candidate, failing: list[str], expected: str, *, sandbox: str = "", unsandboxed: bool = False
) -> str:
    """What the approve gate shows: who proposed what, why, what the guard checked and warns of, how
    the patch will run (`sandbox`), and the diff.

    Everything the proposal or the model wrote is escaped; the diff has a number on every line.
    """
    calls = "".join(
        f"\n  llm call: {one_line(c.model, limit=100)}, {c.prompt_tokens}+"
        f"{c.completion_tokens} tokens, {c.latency_ms:.0f} ms"
        for c in proposal.llm_calls
    )
    recipe = f" (recipe {one_line(proposal.recipe)})" if proposal.recipe else ""
    hidden = hidden_count(proposal.diff) + hidden_count(proposal.rationale)
    warning = (
        f"WARNING: the proposal holds {hidden} control or invisible character(s), shown as \\x.. / \\u....\n"
        if hidden
        else ""
    )
    rationale = visible(proposal.rationale).replace("\n", "\n     ")
    return (
        f"proposal {proposal.id} by {one_line(proposal.proposer)}{recipe}: "
        f"{proposal.changed_lines} changed lines in {', '.join(proposal.files)}{calls}\n"
        f"why: {rationale}\n"
        f"it aims at: {', '.join(failing)} failing at {expected[:12]}\n"
        f"guard: {'; '.join(one_line(r) for r in proposal.guard_reasons)}\n{warning}"
        + "".join(f"WARNING: {one_line(w, limit=300)}\n" for w in proposal.guard_warnings)
        + (f"WARNING: {sandbox}\n" if unsandboxed else f"sandbox: {sandbox}\n" if sandbox else "")
        + f"\n{numbered(proposal.diff)}"
    )


def commit_message(
    *,
    handler: str,
    proposal: Candidate,
    run_id: str,
    failing: list[str],
    expected: str,
    decisions: list[Decided],
    bundle_rel: str,
) -> str:
    # Quoted on one line: an actor cannot end the paragraph and forge a trailer (Signed-off-by: ...).
    approvals = "; ".join(
        f"{gate}: {d.decision} by {quoted(d.actor)}"
        + (f" (delegated by {quoted(d.delegated_by)})" if d.delegated_by else "")
        for gate, d in decisions
    )
    recipe = f": {proposal.recipe}" if proposal.recipe else ""
    return (
        f"Repair {handler} ({proposal.proposer}{recipe})\n\n"
        f"acklab flow {run_id}: {', '.join(failing)} failed at {expected[:12]} and pass on this patch.\n"
        f"Approved: {approvals}\nTrail: {bundle_rel}/trail.json\n"
    )


def relative(path: Path, base: Path) -> str:
    try:
        return os.path.relpath(path, base) if path.resolve().is_relative_to(base.resolve()) else str(path)
    except ValueError:  # pragma: no cover - different drives
        return str(path)


def run_outputs(run: LabRun, out: Path) -> LabRunOutputs:
    """What the trail records of a lab run, its paths relative to the evidence directory."""
    paths = [run.bundle, *(e.incident for e in run.experiments.values())]
    return run.outputs({p: relative(Path(p), out) for p in paths if p})
