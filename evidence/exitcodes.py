"""The exit-code contract shared by every acklab command (README, "Exit codes").

It lives in the leaf package so that every layer can name the codes without importing
upward. "The handler failed" (VERDICT_FAILED) and "the lab failed" (LAB_ERROR) are never
the same code.
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """Process exit codes of every `acklab` command."""

    OK = 0
    VERDICT_FAILED = 1
    USAGE = 2
    INVALID_INPUT = 3
    LAB_ERROR = 4
    REFUSED = 5
    INTERRUPTED = 6
    INTEGRITY = 7


class AcklabError(Exception):
    """Base of every package's root exception; carries the exit code the CLI should use.

    Package trees (each drawn in its own ``errors`` module):
    ``EvidenceError``, ``HarnessError``, ``ConsoleError``, ``FlowError``.
    """

    exit_code: ExitCode = ExitCode.LAB_ERROR

    def __init__(self, message: str, *, exit_code: ExitCode | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code
