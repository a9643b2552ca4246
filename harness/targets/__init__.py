"""Targets: the built-in fixture (``fixture:live``, ``fixture:unsafe``), served in this process or
from another checkout by processes of its own (``--checkout DIR``), or a spec file."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from acklab.harness.errors import SpecError
from acklab.harness.targets.base import Endpoint, Expect, Needs, Target, check_local, is_loopback

if TYPE_CHECKING:
    from acklab.harness.procs.confinement import Confinement

__all__ = ["Endpoint", "Expect", "Needs", "Target", "check_local", "is_loopback", "resolve_target"]


def resolve_target(
    ref: str,
    *,
    db_url: str | None = None,
    allow_remote: bool = False,
    checkout: Path | None = None,
    allow_foreign_service: bool = False,
    confinement: Confinement | None = None,
    schema_from: Path | None = None,
) -> Target:
    """``fixture:live|fixture:unsafe`` (of `checkout` when given, confined by `confinement`, its schema
    from `schema_from`) or the path of a ``kind: target`` spec file (with `checkout`: a file of that
    checkout, served by its ``command:`` from a confined copy of it)."""
    if checkout is not None:
        if not ref.startswith("fixture:"):
            if db_url:
                raise SpecError(
                    f"--checkout with --target {ref!r}: --db serves the fixture on another database; a target "
                    "spec names its own (database: and {{database_url}})"
                )
            from acklab.harness.targets.served_spec import served_spec_target

            return served_spec_target(ref, checkout, confinement=confinement)
        from acklab.harness.targets.checkout import checkout_target

        return checkout_target(ref, checkout, db_url=db_url, confinement=confinement, schema_from=schema_from)
    if ref.startswith("fixture:"):
        # Imported here: only the fixture target needs the app (and its import cost).
        from acklab.harness.targets.fixture import fixture_target

        return fixture_target(ref, db_url=db_url)
    from acklab.harness.targets.spec import load_target

    return load_target(Path(ref), allow_remote=allow_remote, allow_foreign_service=allow_foreign_service)
