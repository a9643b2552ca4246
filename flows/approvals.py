"""Approval gates and where their decisions come from. No decision, no progress.

Two gates: `approve` (the proposal, before it is applied) and `approve-gap` (publishing a
patch whose strike-again found a gap, taken knowing the gap). A decision is `approve`,
`modify` (the feedback goes back to the proposer) or `reject` (stop), and names its actor
and, when delegated, who delegated it.

Sources: a decisions file (`--decisions FILE`, consumed in order per gate), an interactive
prompt on a terminal, or `--auto-approve` (recorded as actor "auto", source "auto",
delegated by whoever turned it on: in a GitLab Duo flow the person who triggered it and
approved its human-input step, `DUO_WORKFLOW_GIT_USER_NAME <..._EMAIL>`). Auto-approval covers the `approve` gate only: a known
gap is published only on a decision that was taken knowing it.

`actor`, `delegated_by` and `reason` end up in the trail, the MR note and the commit message:
they are single-line text without control characters (a decisions file that breaks this is
refused, exit 3; the terminal asks again).
"""

from __future__ import annotations

import getpass
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TextIO

import click

from acklab.evidence.clock import utcnow
from acklab.evidence.documents.trail import Decision as TrailDecision
from acklab.evidence.errors import EvidenceInvalid
from acklab.evidence.loading import SPEC, DocumentError, load_json, load_yaml
from acklab.evidence.validate import validate

from .duo import triggered_by
from .errors import FlowSpecInvalid, GateRefused, NoDecision
from .escape import hidden_count, line_break, visible

GATES = ("approve", "approve-gap")
CHOICES = ("approve", "modify", "reject")
ONE_LINE_FIELDS = ("actor", "delegated_by", "reason")


def text_problem(value: str) -> str | None:
    """Why `value` cannot be an actor, a delegation or a reason (None when it can)."""
    broken = line_break(value)
    if broken:
        return f"holds a line break ({broken}); write it on one line"
    if hidden_count(value):
        return f"holds control or invisible characters ({visible(value, keep_newlines=False)!r}); remove them"
    return None


@dataclass(frozen=True)
class Question:
    """What a gate asks: which proposal, and everything the approver should see."""

    gate: str
    proposal_id: str
    proposal_sha256: str
    summary: str


@dataclass(frozen=True)
class Decision:
    gate: str
    decision: str
    actor: str
    delegated_by: str | None
    source: str
    reason: str
    proposal: str
    decided_at: str
    feedback: str | None = None

    def as_trail(self) -> TrailDecision:
        """The decision as the trail records it."""
        reason = self.reason
        if self.feedback:
            reason = f"{reason} | feedback: {self.feedback}" if reason else f"feedback: {self.feedback}"
        return TrailDecision(
            decision=self.decision,  # type: ignore[arg-type]  # one of CHOICES, checked on entry
            actor=self.actor,
            delegated_by=self.delegated_by,
            source=self.source,  # type: ignore[arg-type]  # tty, file or auto
            reason=reason,
            proposal=self.proposal,
            decided_at=self.decided_at,
        )


class DecisionSource(Protocol):
    """Answers a gate's question, or raises NoDecision."""

    name: str

    def decide(self, question: Question) -> Decision: ...


def invoking_user() -> str:
    """Who runs the flow: the person who triggered a GitLab Duo flow (a flow has no
    GITLAB_USER_LOGIN), GitLab's user in a pipeline, the login name otherwise."""
    who = triggered_by(os.environ)
    if who:
        return who
    for var in ("GITLAB_USER_LOGIN", "USER", "LOGNAME"):
        if os.environ.get(var):
            return os.environ[var]
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # pragma: no cover - no passwd entry
        return "unknown"


class FileDecisions:
    """Decisions read from a YAML or JSON list, consumed in order per gate."""

    name = "file"

    def __init__(self, entries: Sequence[dict[str, Any]], *, origin: str) -> None:
        self.origin = origin
        self._queues: dict[str, list[dict[str, Any]]] = {gate: [] for gate in GATES}
        for index, entry in enumerate(entries, start=1):
            self._queues[entry["gate"]].append({**entry, "_index": index})

    @classmethod
    def load(cls, path: Path) -> FileDecisions:
        # Bounded like a spec: a decisions file is input (exit 3 when too big, too deep, aliased).
        what = f"the decisions file {path}"
        try:
            if str(path).endswith(".json"):
                doc = load_json(Path(path), limits=SPEC, what=what)
            else:
                doc = load_yaml(Path(path), limits=SPEC, what=what)
        except DocumentError as exc:
            raise FlowSpecInvalid(str(exc)) from exc
        try:
            validate("decisions", doc, what=f"decisions file {path}")
        except EvidenceInvalid as exc:
            raise FlowSpecInvalid(
                f"{exc}; expected a list like [{{gate: approve, decision: approve, actor: alice, "
                "delegated_by: bob}}]"
            ) from exc
        for index, entry in enumerate(doc, start=1):
            for name in ONE_LINE_FIELDS:
                problem = text_problem(entry[name]) if isinstance(entry.get(name), str) else None
                if problem:
                    raise FlowSpecInvalid(f"decision #{index} of {path}: {name} {problem}; nothing was run")
        return cls(doc, origin=str(path))

    def decide(self, question: Question) -> Decision:
        queue = self._queues[question.gate]
        if not queue:
            raise NoDecision(
                f"the decisions file {self.origin} holds no (further) decision for the "
                f"{question.gate!r} gate; add one, e.g. {{gate: {question.gate}, decision: approve, "
                "actor: <you>}"
            )
        entry = queue.pop(0)
        bound = entry.get("proposal_sha256")
        if bound and bound != question.proposal_sha256:
            raise GateRefused(
                f"decision #{entry['_index']} of {self.origin} ({entry['decision']} by {entry['actor']}) "
                f"is bound to proposal sha256 {bound[:12]}, but the proposal is "
                f"{question.proposal_sha256[:12]}; it decides nothing about this one"
            )
        return Decision(
            gate=question.gate,
            decision=entry["decision"],
            actor=entry["actor"],
            delegated_by=entry.get("delegated_by"),
            source="file",
            reason=entry.get("reason", ""),
            feedback=entry.get("feedback"),
            proposal=question.proposal_id,
            decided_at=utcnow(),
        )


class AutoApprove:
    """`--auto-approve`: approves the `approve` gate only; never the default."""

    name = "auto"

    def __init__(self, delegated_by: str | None = None) -> None:
        self.delegated_by = delegated_by or invoking_user()

    def decide(self, question: Question) -> Decision:
        if question.gate != "approve":
            raise NoDecision(
                f"--auto-approve does not decide the {question.gate!r} gate: publishing a patch "
                "with a known gap needs a decision taken knowing it (--decisions FILE or a terminal)"
            )
        return Decision(
            gate=question.gate,
            decision="approve",
            actor="auto",
            delegated_by=self.delegated_by,
            source="auto",
            reason="--auto-approve",
            proposal=question.proposal_id,
            decided_at=utcnow(),
        )


class TerminalDecisions:
    """Asks on the terminal: shows the question, reads decision, actor, delegation and reason."""

    name = "tty"

    def __init__(self, stream: TextIO | None = None) -> None:
        self._stream = stream

    def decide(self, question: Question) -> Decision:
        # The summary quotes the proposal; escaped again here, whoever built it.
        click.echo(visible(question.summary), err=True)
        decision = click.prompt(
            f"[{question.gate}] decision", type=click.Choice(CHOICES), err=True, default="reject"
        )
        actor = click.prompt(
            "actor (who decides)", default=invoking_user(), err=True, value_proc=_one_line_answer
        )
        delegated = click.prompt(
            "delegated by (empty if you decide in your own name)",
            default="",
            err=True,
            value_proc=_one_line_answer,
        )
        reason = click.prompt("reason", default="", err=True, value_proc=_one_line_answer)
        feedback = None
        if decision == "modify":
            feedback = click.prompt("feedback for the proposer", err=True)
        return Decision(
            gate=question.gate,
            decision=decision,
            actor=actor,
            delegated_by=delegated or None,
            source="tty",
            reason=reason,
            feedback=feedback,
            proposal=question.proposal_id,
            decided_at=utcnow(),
        )


def _one_line_answer(value: str) -> str:
    problem = text_problem(value)
    if problem:
        raise click.BadParameter(f"this {problem}")  # click asks again
    return value


class NoSource:
    """No file, no --auto-approve, no terminal: every gate refuses."""

    name = "none"

    def decide(self, question: Question) -> Decision:
        raise NoDecision(
            f"the {question.gate!r} gate needs a decision and there is no source for one: "
            "pass --decisions FILE, or --auto-approve, or run on a terminal"
        )


def choose_source(*, decisions: Path | None, auto_approve: bool, interactive: bool) -> DecisionSource:
    """The one decision source the flags select (file, auto, terminal), or NoSource."""
    if decisions is not None and auto_approve:
        raise click.UsageError("--decisions and --auto-approve exclude each other; pick one source")
    if decisions is not None:
        return FileDecisions.load(decisions)
    if auto_approve:
        return AutoApprove()
    if interactive:
        return TerminalDecisions()
    return NoSource()
