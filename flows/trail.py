"""The trail: `trail.json` in the flow run's bundle, and one journal row per step.

Each checkpoint is recorded with its start, end, input hashes, outputs, decision and
error. The trail is rewritten (atomically, validated) after every checkpoint, so a flow
that is killed leaves a trail saying how far it got (outcome "interrupted" until it ends).
"""

from __future__ import annotations

import hashlib
import secrets as _random
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from acklab.evidence.bundle import BundleWriter
from acklab.evidence.clock import utcnow
from acklab.evidence.documents.trail import (
    TRAIL_SCHEMA,
    Checkpoint,
    CheckpointName,
    MergeRequest,
    Outcome,
    Proposal,
    Scope,
    TrailDocument,
    TrailSandbox,
)
from acklab.evidence.journal import Journal, journal_path

from .approvals import Decision
from .errors import GateRefused
from .escape import visible
from .spec import FlowSpec


def new_run_id() -> str:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    return f"flow-{stamp}-{_random.token_hex(3)}"


def sha256_of(value: str | bytes) -> str:
    data = value.encode("utf-8") if isinstance(value, str) else value
    return hashlib.sha256(data).hexdigest()


@dataclass
class CheckpointRecord:
    """A checkpoint while it runs; the `with trail.checkpoint(...)` body fills in outputs."""

    name: CheckpointName
    started_at: str
    input_hashes: dict[str, str]
    attempt: int | None = None
    outputs: dict[str, Any] = field(default_factory=dict)
    decision: Decision | None = None
    status: Literal["ok", "failed", "refused", "skipped"] = "ok"
    error: str | None = None
    ended_at: str | None = None

    def refuse(self, why: str) -> None:
        """A gate of this checkpoint said no (the flow ends refused, not failed)."""
        self.status, self.error = "refused", why

    def fail(self, why: str) -> None:
        """The checkpoint did not pass (the handler still fails, a check failed)."""
        self.status, self.error = "failed", why

    def document(self) -> Checkpoint:
        """The checkpoint as trail.json records it."""
        return Checkpoint(
            name=self.name,
            started_at=self.started_at,
            ended_at=self.ended_at,
            duration_ms=_duration_ms(self.started_at, self.ended_at),
            status=self.status,
            input_hashes=dict(self.input_hashes),
            outputs=self.outputs,
            decision=self.decision.as_trail() if self.decision else None,
            error=self.error,
            attempt=self.attempt,
        )


def _duration_ms(started: str, ended: str | None) -> float | None:
    if ended is None:
        return None
    start = datetime.fromisoformat(started.replace("Z", "+00:00"))
    end = datetime.fromisoformat(ended.replace("Z", "+00:00"))
    return max(0.0, round((end - start).total_seconds() * 1000, 3))


class Trail:
    """Records one flow run into `<out>/<run_id>/` (bundle kind "flow") and the evidence journal."""

    def __init__(self, *, spec: FlowSpec, out: Path, secrets: list[str], run_id: str | None = None) -> None:
        self.run_id = run_id or new_run_id()
        self.out = Path(out)
        self.writer = BundleWriter(self.out / self.run_id, kind="flow", secrets=list(secrets))
        self.journal = Journal(journal_path(self.out), secrets=list(secrets))
        self._decisions: list[tuple[str, Decision]] = []
        self.doc = TrailDocument(
            schema=TRAIL_SCHEMA,
            flow=spec.name,
            run_id=self.run_id,
            started_at=utcnow(),
            ended_at=None,
            target=spec.target,
            scope=Scope(allow=list(spec.scope.allow), deny=list(spec.scope.deny)),
            expected_head_sha=None,
            merge_request=None,
            checkpoints=[],
            proposals=[],
            outcome="interrupted",
            outcome_detail="the flow is running (or was stopped before it ended)",
            exit_code=6,
            spec_sha256=spec.sha256 or None,
        )
        self.journal.record(
            run_id=self.run_id,
            kind="run",
            name=spec.name,
            status="started",
            started_at=self.doc.started_at,
            payload={"kind": "flow", "spec": spec.path, "target": spec.target},
        )

    @property
    def bundle(self) -> Path:
        return self.writer.root

    def attempts(self, name: str) -> int:
        """How many times checkpoint `name` has been recorded so far."""
        return sum(cp.name == name for cp in self.doc.checkpoints)

    def decisions(self) -> list[tuple[str, Decision]]:
        """(gate, decision) of every gate decided so far, in order."""
        return list(self._decisions)

    def expect_head(self, sha: str) -> None:
        """The head the flow starts from: publishing is refused unless it still is the head."""
        self._set(expected_head_sha=sha)

    def sandboxed(self, mode: str, description: str) -> None:
        """How the code under repair runs (mode ``none``: --unsandboxed, stated plainly)."""
        self._set(sandbox=TrailSandbox.model_validate({"mode": mode, "description": description}))

    def publishing_to(self, merge_request: Mapping[str, Any]) -> None:
        """The merge request the flow will publish to."""
        self._set(merge_request=MergeRequest.model_validate(dict(merge_request)))

    @contextmanager
    def checkpoint(
        self, name: CheckpointName, *, inputs: Mapping[str, str | bytes], attempt: int | None = None
    ) -> Iterator[CheckpointRecord]:
        """Time and record one checkpoint; an error escaping it marks it failed (a gate's refusal is
        recorded by the checkpoint itself, `CheckpointRecord.refuse`)."""
        record = CheckpointRecord(
            name=name,
            started_at=utcnow(),
            input_hashes={key: sha256_of(value) for key, value in inputs.items()},
            attempt=attempt,
        )
        self.journal.record(
            run_id=self.run_id, kind="checkpoint", name=name, status="started", started_at=record.started_at
        )
        try:
            yield record
        except GateRefused as exc:
            record.refuse(str(exc))
            raise
        except BaseException as exc:
            record.fail(str(exc) or type(exc).__name__)
            raise
        finally:
            record.ended_at = utcnow()
            self._set(checkpoints=[*self.doc.checkpoints, record.document()])
            self.journal.record(
                run_id=self.run_id,
                kind="checkpoint",
                name=name,
                status=record.status,
                started_at=record.started_at,
                ended_at=record.ended_at,
                payload={
                    "attempt": record.attempt,
                    "input_hashes": record.input_hashes,
                    "outputs": record.outputs,
                    "error": record.error,
                },
            )
            if record.decision is not None:
                self._decisions.append((name, record.decision))
                self.journal.record(
                    run_id=self.run_id,
                    kind="decision",
                    name=record.decision.gate,
                    status=record.decision.decision,
                    started_at=record.decision.decided_at,
                    ended_at=record.decision.decided_at,
                    payload=record.decision.as_trail().dump(),
                )

    def skipped(self, name: CheckpointName, why: str) -> None:
        now = utcnow()
        record = CheckpointRecord(name=name, started_at=now, input_hashes={}, status="skipped", error=why)
        record.ended_at = now
        self._set(checkpoints=[*self.doc.checkpoints, record.document()])
        self.journal.record(
            run_id=self.run_id, kind="checkpoint", name=name, status="skipped", payload={"why": why}
        )

    def add_proposal(self, proposal: Proposal) -> None:
        """The diff exactly as proposed in ``proposals/<id>.diff`` (its sha256 is ``diff_sha256``);
        in trail.json with its control characters escaped, as every reader is shown it."""
        self._set(proposals=[*self.doc.proposals, proposal.but(diff=visible(proposal.diff))])
        self.writer.write_bytes(f"proposals/{proposal.id}.diff", proposal.diff.encode("utf-8"))
        self.journal.record(
            run_id=self.run_id,
            kind="proposal",
            name=proposal.id,
            status="allowed" if proposal.guard.allowed else "rejected",
            payload={k: v for k, v in proposal.dump().items() if k != "diff"},
        )

    def write_text(self, relpath: str, text: str) -> str:
        """Write a text file (a check's log) into the bundle, secrets redacted; returns its relpath."""
        self.writer.write_text(relpath, text)
        return relpath

    def finish(self, *, outcome: Outcome, detail: str, exit_code: int) -> Path:
        """Close the trail: outcome, exit code, manifest. Returns the bundle path."""
        self._set(outcome=outcome, outcome_detail=detail, exit_code=exit_code, ended_at=utcnow())
        self.journal.record(
            run_id=self.run_id,
            kind="run",
            name=self.doc.flow,
            status=outcome,
            started_at=self.doc.started_at,
            ended_at=self.doc.ended_at,
            payload={"exit_code": exit_code, "detail": detail, "bundle": str(self.bundle)},
        )
        self.journal.close()
        return self.writer.finalize()

    def _set(self, **changes: Any) -> None:
        self.doc = self.doc.but(**changes)
        self.writer.write_document("trail.json", self.doc)
