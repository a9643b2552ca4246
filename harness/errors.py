"""Errors of the harness package.

A finding about the handler under test is never an exception: it is a verdict. These are
the lab's own failures, each carrying its exit code (README, "Exit codes").

AcklabError (evidence.exitcodes)
└── HarnessError                  exit 4: the lab could not run
    ├── SpecError                 exit 3: a target/experiment spec or an option is invalid
    │   ├── UnknownExperiment     exit 3: an experiment name that does not exist
    │   └── Http2Refused          exit 3: a single-packet burst against a target without HTTP/2
    ├── RemoteRefused             exit 5: a target off the loopback range without --allow-remote
    ├── ForeignService            exit 5: the endpoint is served by a process outside the job
    ├── TargetUnreachable         exit 4: the endpoint does not accept connections
    ├── ProbeError                exit 4: the effects probe (SQL or HTTP) could not be read
    └── RunInterrupted            exit 6: Ctrl-C / SIGTERM; the run is resumable
"""

from __future__ import annotations

from acklab.evidence.exitcodes import AcklabError, ExitCode


class HarnessError(AcklabError):
    """Root of the harness package's errors: the lab, not the handler, failed."""

    exit_code = ExitCode.LAB_ERROR


class SpecError(HarnessError):
    """A spec file or an option is invalid; the message names the field, the value and the fix."""

    exit_code = ExitCode.INVALID_INPUT


class UnknownExperiment(SpecError):
    """An experiment name that is not one of the stable names."""


class Http2Refused(SpecError):
    """``burst_sync: single-packet`` asked of a target that does not speak HTTP/2."""


class RemoteRefused(HarnessError):
    """A target endpoint off the loopback range, refused before any traffic was sent."""

    exit_code = ExitCode.REFUSED


class ForeignService(HarnessError):
    """The endpoint of a service the lab did not start is served by a process outside the job
    (a server left over from another job); refused before any traffic was sent."""

    exit_code = ExitCode.REFUSED


class TargetUnreachable(HarnessError):
    """The target's endpoint refused or did not answer the connection."""

    exit_code = ExitCode.LAB_ERROR


class ProbeError(HarnessError):
    """The effects probe could not read the target's database (or its effects endpoint)."""

    exit_code = ExitCode.LAB_ERROR


class RunInterrupted(HarnessError):
    """The run was interrupted (Ctrl-C, SIGTERM or its deadline) after writing what it had; resumable."""

    exit_code = ExitCode.INTERRUPTED

    def __init__(self, message: str, *, deadline: bool = False) -> None:
        super().__init__(message)
        self.deadline = deadline  # False: a signal (Ctrl-C, SIGTERM) stopped it
