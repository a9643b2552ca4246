"""Faults on a real TCP link (the fixture's link to PostgreSQL), in Toxiproxy's vocabulary.

`FaultProxy` (asyncio) and `ProxyThread` (for sync code) forward a loopback port to one
upstream and inject one fault at a time: `Latency`, `Bandwidth`, `SlowClose`, `Timeout`
(blackhole), `ResetPeer`, `Slicer`, `LimitData`, `Down`. Every use of `inject` ends with
the fault lifted and the link verified healthy, and every step is a `ProxyEvent`.
"""

from __future__ import annotations

from .errors import FaultInUse, FaultInvalid, LinkUnhealthy, NetFaultError, ProxyRefused
from .events import ProxyEvent
from .faults import (
    FAULT_TYPES,
    Bandwidth,
    Down,
    Fault,
    Latency,
    LimitData,
    ResetPeer,
    Slicer,
    SlowClose,
    Timeout,
    fault_from_record,
)
from .proxy import FaultProxy, Probe, postgres_probe
from .thread import ProxyThread

__all__ = [
    "FAULT_TYPES",
    "Bandwidth",
    "Down",
    "Fault",
    "FaultInUse",
    "FaultInvalid",
    "FaultProxy",
    "Latency",
    "LimitData",
    "LinkUnhealthy",
    "NetFaultError",
    "Probe",
    "ProxyEvent",
    "ProxyRefused",
    "ProxyThread",
    "ResetPeer",
    "Slicer",
    "SlowClose",
    "Timeout",
    "fault_from_record",
    "postgres_probe",
]
