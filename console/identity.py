"""Which code a verdict belongs to, and which runs a repair flow made: small readers over documents.

A verdict's identity is the target's name plus the handler's revision. The revision is read
from the incident's ``target`` object: for the built-in fixture the content hash of the
handler module that ran (``handler_sha256``: the sandbox of the repair story holds the unsafe
handler under the live name), otherwise the commit (``commit_sha``) and whether its
checkout was dirty. Each reader takes one typed document (`acklab.evidence.documents`) and
returns a plain value.
"""

from __future__ import annotations

from dataclasses import dataclass

from acklab.evidence.documents.incident import IncidentTarget
from acklab.evidence.documents.trail import LabRunOutputs, TrailDocument

HANDLER_PREFIX = "handler:"
DIRTY_SUFFIX = "+dirty"
SHORT = 8
HEAD, PATCHED = "head", "patched"
_HEX = frozenset("0123456789abcdef")


def _hex(value: str | None, low: int, high: int) -> str | None:
    text = (value or "").lower()
    return text if low <= len(text) <= high and set(text) <= _HEX else None


def revision_of(target: IncidentTarget) -> str | None:
    """The revision of an incident's ``target`` object: ``handler:<sha256>``, ``<commit>[+dirty]``
    or None when the incident does not say (older bundles, a spec target outside git)."""
    digest = _hex(target.handler_sha256, 64, 64)
    if digest:
        return HANDLER_PREFIX + digest
    commit = _hex(target.commit_sha, 7, 64)
    if commit:
        return commit + (DIRTY_SUFFIX if target.dirty is True else "")
    return None


def short_revision(revision: str | None) -> str:
    """What a row shows: ``handler 1d5cb188``, ``commit 89abcdef+dirty`` or ``revision unknown``."""
    if not revision:
        return "revision unknown"
    if revision.startswith(HANDLER_PREFIX):
        return "handler " + revision.removeprefix(HANDLER_PREFIX)[:SHORT]
    commit, dirty, _ = revision.partition(DIRTY_SUFFIX)
    return "commit " + commit[:SHORT] + dirty


@dataclass(frozen=True, order=True)
class Identity:
    """One handler under test: the target's name and its revision."""

    target: str
    revision: str | None

    @property
    def short(self) -> str:
        return short_revision(self.revision)

    @property
    def label(self) -> str:
        return f"{self.target} @ {self.short}"


@dataclass(frozen=True)
class FlowRun:
    """A run a repair flow made: on the expected head (``head``) or on the patched worktree."""

    flow_bundle: str  # the key of the bundle holding trail.json
    role: str
    checkpoint: str


def _role(checkpoint: str, key: str) -> str:
    # strike-again records both sides; reproduce runs the head; verify (and anything after
    # apply) runs the patched checkout.
    if key == "before" or (key != "after" and checkpoint == "reproduce"):
        return HEAD
    return PATCHED


def trail_runs(trail: TrailDocument) -> dict[str, tuple[str, str]]:
    """run id -> (role, checkpoint) for every lab run a trail's checkpoints name (``lab_run_id``)."""
    found: dict[str, tuple[str, str]] = {}
    for checkpoint in trail.checkpoints:
        outputs = checkpoint.outputs
        sides = [("", outputs)] + [(k, outputs.get(k)) for k in ("before", "after")]
        for key, side in sides:
            run = LabRunOutputs.within(side)
            if run is not None:
                found.setdefault(run.lab_run_id, (_role(checkpoint.name, key), checkpoint.name))
    return found
