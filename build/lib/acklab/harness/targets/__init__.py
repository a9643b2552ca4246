"""Targets: the built-in fixture (``fixture:live``, ``fixture:unsafe``) or a spec file."""

from __future__ import annotations

from pathlib import Path

from acklab.harness.targets.base import Endpoint, Expect, Needs, Target, check_local, is_loopback

__all__ = ["Endpoint", "Expect", "Needs", "Target", "check_local", "is_loopback", "resolve_target"]


def resolve_target(ref: str, *, db_url: str | None = None, allow_remote: bool = False) -> Target:
    """``fixture:live|fixture:unsafe`` or the path of a ``kind: target`` spec file."""
    if ref.startswith("fixture:"):
        # Imported here: only the fixture target needs the app (and its import cost).
        from acklab.harness.targets.fixture import fixture_target

        return fixture_target(ref, db_url=db_url)
    from acklab.harness.targets.spec import load_target

    return load_target(Path(ref), allow_remote=allow_remote)
