"""Errors of the evidence package: its one exception tree, every class in it.

The exit code is the class's, never the raise site's; classes defined beside the code that
raises them name their module (``tests/test_errors.py`` checks this drawing against them).

AcklabError (evidence.exitcodes)                exit 4: root of every package's errors
├── EvidenceError                               exit 4: evidence could not be read or written
│   ├── EvidenceInvalid                         exit 3: a document does not validate against its schema
│   ├── IntegrityError                          exit 7: a bundle's files do not match its manifest
│   ├── DocumentError (loading)                 exit 3: a file could not be read within acklab's limits
│   │   └── EvidenceUnreadable (loading)        exit 7: the same, of a bundle's document or the journal
│   ├── JournalError (journal)                  exit 4: the journal could not be opened, read or appended to
│   └── DownloadTooLarge (gitlab_source)        exit 4: an artifact archive grew past the cap while streaming
└── MissingExtra (extras)                       exit 4: a part of acklab that is not installed
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
