"""Errors of the TCP fault proxy; their place in the harness's one tree is drawn in
``harness/errors.py``.

A finding about the system under test is never one of these (it is a verdict).
"""

from __future__ import annotations

from acklab.evidence.exitcodes import ExitCode
from acklab.harness.errors import HarnessError


class NetFaultError(HarnessError):
    """Root of the fault proxy's errors: the lab's link could not be broken or mended."""

    exit_code = ExitCode.LAB_ERROR


class FaultInvalid(NetFaultError):
    """A fault's attributes (or its record in a plan or incident) are not a fault the proxy knows."""

    exit_code = ExitCode.INVALID_INPUT


class ProxyRefused(NetFaultError):
    """The proxy was asked to listen off the loopback range."""

    exit_code = ExitCode.REFUSED


class FaultInUse(NetFaultError):
    """One fault at a time: a fault is already injected on this proxy."""

    exit_code = ExitCode.USAGE


class LinkUnhealthy(NetFaultError):
    """The fault was lifted but a fresh connection through the proxy did not round-trip."""

    exit_code = ExitCode.LAB_ERROR
