"""What a fault proxy did, as typed events with wall-clock timestamps, for the evidence.

The proxy emits them; the journal (or a test) consumes them through a listener, so the
proxy never knows where its record goes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

EventKind: TypeAlias = Literal[
    "started",
    "injected",
    "lifted",
    "healthy-verified",
    "health-failed",
    "connection-reset",
    "connection-closed",
    "stopped",
]


@dataclass(frozen=True)
class ProxyEvent:
    """One thing the proxy did: when (epoch seconds), what, to which fault, and a detail."""

    kind: EventKind
    proxy: str
    fault: dict[str, Any] | None = None
    detail: str = ""
    at: float = field(default_factory=time.time)

    def record(self) -> dict[str, Any]:
        """A JSON-ready dict (timestamps as RFC 3339 UTC strings) for the journal."""
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(self.at)) + f".{int(self.at % 1 * 1e6):06d}Z"
        return {
            "kind": self.kind,
            "proxy": self.proxy,
            "fault": self.fault,
            "detail": self.detail,
            "at": stamp,
        }


EventListener: TypeAlias = Callable[[ProxyEvent], None]
