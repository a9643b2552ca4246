"""Errors of the TCP fault proxy.

AcklabError (evidence.exitcodes)
└── HarnessError (harness.errors)
    └── NetFaultError             exit 4: the proxy could not start, inject or lift a fault
        ├── FaultInUse            exit 2: a second fault was injected while one is active
        └── LinkUnhealthy         exit 4: after lifting, a fresh connection did not round-trip

A finding about the system under test is never one of these (it is a verdict).
"""

from __future__ import annotations

from acklab.evidence.exitcodes import ExitCode
from acklab.harness.errors import HarnessError


class NetFaultError(HarnessError):
    """Root of the fault proxy's errors: the lab's link could not be broken or mended."""

    exit_code = ExitCode.LAB_ERROR


class FaultInUse(NetFaultError):
    """One fault at a time: a fault is already injected on this proxy."""

    exit_code = ExitCode.USAGE


class LinkUnhealthy(NetFaultError):
    """The fault was lifted but a fresh connection through the proxy did not round-trip."""

    exit_code = ExitCode.LAB_ERROR
