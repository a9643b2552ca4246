"""Errors of the repair flow: its one exception tree, every class in it.

AcklabError (evidence.exitcodes)
└── FlowError                          exit 4: the flow could not run (git, a worktree, the lab)
    ├── FlowSpecInvalid                exit 3: a flow spec or decisions file is not valid
    ├── FlowUsageError (init)          exit 2: `flow init` would overwrite a file (no --force)
    ├── GoalInvalid                    exit 3: a Duo flow's goal names no merge request (`--mr goal`)
    ├── ProposerUnavailable            exit 4: the proposer could not be asked (LLM endpoint down, bad reply)
    ├── ModelReplyInvalid              exit 3: the model's reply is too large, too deep or not JSON
    ├── PublishFailed                  exit 4: GitLab could not be reached or refused for a non-gate reason
    └── GateRefused                    exit 5: a safety, scope, approval or head gate said no
        ├── ScopeRefused               exit 5: the scope guard rejected the proposal twice
        ├── NoDecision                 exit 5: an approval gate has no decision source or no decision left
        ├── DecisionRejected           exit 5: an approver rejected
        ├── HeadMoved                  exit 5: the branch head (or the scoped file) moved during the flow
        ├── SandboxUnavailable         exit 5: untrusted code cannot be confined here (and no --unsandboxed)
        │   └── AccountUnavailable (sandbox.account)  exit 5: the sandbox user cannot be found or created
        └── PatchTampered              exit 5: the patched code changed files while it ran, or what was
                                               verified is not what the approved diff makes

Signals caught where they are raised, never an exit code of their own:

ValueError
└── AllowlistError (allowlist)         an import allowlist entry is malformed (the spec check says which)

A handler that still fails after a patch is not an error of the flow: it is a verdict, and
the flow ends with exit 1 (recorded as outcome "failed").
"""

from __future__ import annotations

from acklab.evidence.exitcodes import AcklabError, ExitCode


class FlowError(AcklabError):
    """Root of the repair flow's errors."""

    exit_code = ExitCode.LAB_ERROR


class FlowSpecInvalid(FlowError):
    """A flow spec or a decisions file does not validate; nothing ran."""

    exit_code = ExitCode.INVALID_INPUT


class GoalInvalid(FlowError):
    """A GitLab Duo flow's goal is not an IID or an event naming a merge request; nothing ran."""

    exit_code = ExitCode.INVALID_INPUT


class ProposerUnavailable(FlowError):
    """The proposer could not produce an answer (endpoint unreachable, HTTP error, bad JSON)."""

    exit_code = ExitCode.LAB_ERROR


class ModelReplyInvalid(FlowError):
    """The model endpoint answered with a body acklab refuses to read (size, nesting, not JSON)."""

    exit_code = ExitCode.INVALID_INPUT


class PublishFailed(FlowError):
    """Publishing failed for a reason other than a gate (network, authentication, API error)."""

    exit_code = ExitCode.LAB_ERROR


class GateRefused(FlowError):
    """A gate refused: nothing was applied to the repository or published."""

    exit_code = ExitCode.REFUSED


class ScopeRefused(GateRefused):
    """The scope guard rejected a proposal and its one retry."""

    def __init__(self, message: str, *, reasons: list[str]) -> None:
        super().__init__(message)
        self.reasons = reasons


class NoDecision(GateRefused):
    """An approval gate found no decision: no progress without one."""


class DecisionRejected(GateRefused):
    """An approver rejected the proposal (or the known gap)."""


class HeadMoved(GateRefused):
    """The merge request head or the scoped file changed since the flow started."""


class SandboxUnavailable(GateRefused):
    """Code of a checkout under repair cannot be confined on this machine; nothing untrusted ran."""


class PatchTampered(GateRefused):
    """The patched code rewrote files while it ran, or the verified file is not the approved diff's."""
