"""The one clock every record is stamped with: ISO-8601 UTC, microseconds, a trailing ``Z``.

A module of its own, at the bottom of the evidence package, so that the journal, the bundle
writer and every package above them read the time without importing one another.
"""

from __future__ import annotations

from datetime import UTC, datetime


def utcnow() -> str:
    """Now, as the ISO-8601 UTC timestamp every record uses."""
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")
