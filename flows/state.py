"""What the flow knows after each checkpoint: a frozen value per stage, handed to the next one.

Every checkpoint takes the stage before it and returns the next, or an `Ended` (the flow's
outcome: not needed, proposed, rejected, refused, failed, applied, published). Nothing is
kept anywhere else, so a checkpoint reads only what an earlier one returned::

    Started -> Reproduced -> Proposed -> Applied -> Verified -> Struck -> Ended
                                  ^                                 |
                                  +------------ Revise -------------+

A stage extends the one before it (`Stage.grown`), so each value carries all that came
before: ``struck.expected``, ``struck.repro``, ``struck.verify_run``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any, ParamSpec, Self, TypeVar

from acklab.evidence.documents.trail import CheckRecord, Outcome
from acklab.evidence.exitcodes import AcklabError, ExitCode

from .candidate import Candidate
from .errors import DecisionRejected, GateRefused
from .lab import LabRun
from .report import Comparison
from .worktree import Worktree


@dataclass(frozen=True)
class Stage:
    """Base of the stages: each one grows from the one before it."""

    @classmethod
    def grown(cls, previous: Stage, /, **more: Any) -> Self:
        """This stage: everything `previous` holds, and `more` (which may also update what it holds)."""
        return cls(**({f.name: getattr(previous, f.name) for f in fields(previous)} | more))


@dataclass(frozen=True)
class Started(Stage):
    """The head the flow works from, checked out where nothing can change it."""

    expected: str  # the merge request head (or the checkout's HEAD) every worktree starts from
    head: Worktree
    source: str  # the handler at the head


@dataclass(frozen=True)
class Reproduced(Started):
    """The failure, reproduced on the head."""

    repro: LabRun
    failing: tuple[str, ...]
    incident: str  # the failing experiments and their first violations, as a proposer reads them


@dataclass(frozen=True)
class Proposed(Reproduced):
    """A proposal the scope guard allowed and an approver approved."""

    candidate: Candidate


@dataclass(frozen=True)
class Applied(Proposed):
    """The proposal applied in a worktree of its own."""

    patched: Worktree
    patched_source: str


@dataclass(frozen=True)
class Verified(Applied):
    """The aimed experiments pass on the patch and every verify check passed."""

    verify_run: LabRun
    checks: tuple[CheckRecord, ...]
    summary: tuple[str, ...]


@dataclass(frozen=True)
class Struck(Verified):
    """The experiments the patch was not aimed at, before and after it (empty when none)."""

    before: LabRun | None
    comparisons: tuple[Comparison, ...]
    options: tuple[Mapping[str, Any], ...]

    @property
    def gaps(self) -> list[Comparison]:
        return [c for c in self.comparisons if c.status != "held"]


@dataclass(frozen=True)
class Revise:
    """An approver asked for another proposal, with this feedback."""

    feedback: str | None


@dataclass(frozen=True)
class Ended:
    """How the flow ended: the trail's outcome, why, the exit code, and what it had reached."""

    outcome: Outcome
    detail: str
    exit_code: int
    proposal: Candidate | None = None
    published: Mapping[str, Any] | None = None
    summary: tuple[str, ...] = ()


T = TypeVar("T")
P = ParamSpec("P")


def guarded(reached: Stage | None, step: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T | Ended:
    """`step(*args, **kwargs)`, or how the flow ended when it raised: a gate's refusal, an error of
    the lab, an interruption — each with what the flow had reached (`reached`) for its result."""
    proposal = reached.candidate if isinstance(reached, Proposed) else None
    summary = reached.summary if isinstance(reached, Verified) else ()
    try:
        return step(*args, **kwargs)
    except DecisionRejected as exc:
        return Ended("rejected", str(exc), int(ExitCode.REFUSED), proposal, summary=summary)
    except GateRefused as exc:
        return Ended("refused", str(exc), int(ExitCode.REFUSED), proposal, summary=summary)
    except AcklabError as exc:
        return Ended("error", str(exc), int(exc.exit_code), proposal, summary=summary)
    except KeyboardInterrupt:
        return Ended(
            "interrupted", "interrupted by the user", int(ExitCode.INTERRUPTED), proposal, summary=summary
        )
