"""Errors of the evidence package.

AcklabError (evidence.exitcodes)
└── EvidenceError                 exit 4: evidence could not be read or written
    ├── EvidenceInvalid           exit 3: a document does not validate against its schema
    └── IntegrityError            exit 7: a bundle's files do not match its manifest
"""

from __future__ import annotations

from .exitcodes import AcklabError, ExitCode


class EvidenceError(AcklabError):
    """Root of the evidence package's errors."""

    exit_code = ExitCode.LAB_ERROR


class EvidenceInvalid(EvidenceError):
    """A document does not validate against its schema; nothing was written."""

    exit_code = ExitCode.INVALID_INPUT

    def __init__(self, message: str, *, problems: list[str] | None = None) -> None:
        super().__init__(message)
        self.problems = problems or []


class IntegrityError(EvidenceError):
    """A bundle's files differ from its manifest."""

    exit_code = ExitCode.INTEGRITY
