"""Which code a verdict belongs to, and which runs a repair flow made: small readers over documents.

A verdict's identity is the target's name plus the handler's revision. The revision is read
from the incident's ``target`` object: for the built-in fixture the content hash of the
handler module that ran (``handler_sha256``: the sandbox of the repair story holds the unsafe
handler under the live name), otherwise the commit (``commit_sha``) and, when its checkout
was dirty, the hash of its tracked changes (``changes``: ``<commit>+<changes>``; older
bundles only say ``+dirty``). Each reader takes one typed document (`acklab.evidence.documents`) and
returns a plain value.
"""

from __future__ import annotations

from dataclasses import dataclass

from acklab.evidence.documents.incident import IncidentTarget
from acklab.evidence.documents.trail import LabRunOutputs, TrailDocument

HANDLER_PREFIX = "handler:"
DIRTY_SUFFIX = "+dirty"
SHORT = 8
SHORT_CHANGES = 6  # b02f02d7+3fa1c2, as harness.targets.provenance labels it
HEAD, PATCHED = "head", "patched"
_HEX = frozenset("0123456789abcdef")


def _hex(value: str | None, low: int, high: int) -> str | None:
    text = (value or "").lower()
    return text if low <= len(text) <= high and set(text) <= _HEX else None


def revision_of(target: IncidentTarget) -> str | None:
    """The revision of an incident's ``target`` object: ``handler:<sha256>``, ``<commit>``,
    ``<commit>+<changes sha256>`` (dirty), ``<commit>+dirty`` (dirty, from a bundle that did not
    hash the changes) or None when the incident does not say (older bundles, a spec target
    outside git)."""
    digest = _hex(target.handler_sha256, 64, 64)
    if digest:
        return HANDLER_PREFIX + digest
    commit = _hex(target.commit_sha, 7, 64)
    if not commit:
        return None
    if target.dirty is not True:
        return commit
    changes = _hex(target.changes, 64, 64)
    return f"{commit}+{changes}" if changes else commit + DIRTY_SUFFIX


def commit_of(target: IncidentTarget) -> str | None:
    """The commit an incident's run was made at (``commit_sha``), or None when it does not say."""
    return _hex(target.commit_sha, 7, 64)


def short_revision(revision: str | None) -> str:
    """What a row shows: ``handler 1d5cb188``, ``commit 89abcdef+3fa1c2`` (the hash of its
    uncommitted changes), ``commit 89abcdef+dirty`` or ``revision unknown``."""
    if not revision:
        return "revision unknown"
    if revision.startswith(HANDLER_PREFIX):
        return "handler " + revision.removeprefix(HANDLER_PREFIX)[:SHORT]
    commit, plus, changes = revision.partition("+")
    suffix = "" if not plus else "+" + (changes if changes == "dirty" else changes[:SHORT_CHANGES])
    return "commit " + commit[:SHORT] + suffix


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
