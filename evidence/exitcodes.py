"""The exit-code contract shared by every acklab command (docs/cli.md#exit-codes-every-command).

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
    """Base of every package's root exception; its class says the exit code the CLI uses.

    The code is a fact of the class, never of a raise site: an error that needs another code
    is another class. Package trees, each drawn whole in its own ``errors`` module (and
    checked against the classes by ``tests/test_errors.py``): ``EvidenceError`` and
    ``MissingExtra`` (``evidence/errors.py``), ``HarnessError`` (``harness/errors.py``),
    ``ConsoleError`` (``console/errors.py``), ``FlowError`` (``flows/errors.py``).
    """

    exit_code: ExitCode = ExitCode.LAB_ERROR
