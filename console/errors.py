"""Errors of the console package: its one exception tree, every class in it.

AcklabError (evidence.exitcodes)
└── ConsoleError                  exit 4: the console or the snapshot could not be served or built
    ├── EvidenceDirError          exit 3: --evidence names no readable directory
    ├── OutputRefused             exit 5: --out would overwrite or contain the evidence it reads
    └── PortBusy                  exit 5: the console's --port is taken by another listener

Signals caught where they are raised, never an exit code of their own:

Exception
└── OutlineError (outline)        an incident cannot be read within the limits (the page says why)

starlette.exceptions.HTTPException
└── NotFound (app)                a 404 naming what was not found (the console's error page)

A bundle that fails verification is not an error here: the console shows it under a
warning, because reviewers need to see what was tampered with.
"""

from __future__ import annotations

from acklab.evidence.exitcodes import AcklabError, ExitCode


class ConsoleError(AcklabError):
    """Root of the console package's errors."""

    exit_code = ExitCode.LAB_ERROR


class EvidenceDirError(ConsoleError):
    """The evidence directory is missing or is not a directory."""

    exit_code = ExitCode.INVALID_INPUT


class OutputRefused(ConsoleError):
    """The snapshot's output directory is unsafe (it equals or contains the evidence directory)."""

    exit_code = ExitCode.REFUSED


class PortBusy(ConsoleError):
    """The address the console would listen on is in use (another console, another server)."""

    exit_code = ExitCode.REFUSED
