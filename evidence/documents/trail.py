"""The repair trail (``trail.json``): every checkpoint, proposal and decision of one flow run.

`TrailDocument` and its parts mirror ``trail.schema.json``. A checkpoint's ``outputs`` is
free in the schema; the records the repair flow puts there are typed below too
(`LabRunOutputs`, `LabExperiment`, `StrikeComparison`, `CheckRecord`), so that the flow
writes them and the console reads them with one model each. A reader still meets outputs
of other shapes (a hand-edited trail, an older flow) and shows those as they are.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Final, Literal, Self

from pydantic import Field

from .base import Document, Omit
from .records import Sha256, Timestamp
from .run import RunId

TRAIL_SCHEMA: Final = "acklab/trail/v1"
CheckpointName = Literal[
    "reproduce", "propose", "approve", "apply", "verify", "strike-again", "approve-gap", "publish"
]
Outcome = Literal[
    "published", "applied", "proposed", "not-needed", "rejected", "refused", "failed", "error", "interrupted"
]
NonEmpty = Annotated[str, Field(min_length=1)]


class Decision(Document):
    """The approval taken at a gate: who decided, in whose name, from where, and why."""

    SCHEMA = "trail#/$defs/decision"

    decision: Literal["approve", "modify", "reject"]
    actor: NonEmpty
    delegated_by: str | None
    source: Literal["tty", "file", "auto"]
    reason: str
    proposal: Omit[str] = None
    decided_at: Omit[Timestamp] = None


class Checkpoint(Document):
    """One checkpoint of the flow, with the hashes of what it read and what it produced."""

    SCHEMA = "trail#/$defs/checkpoint"

    name: CheckpointName
    started_at: Timestamp
    ended_at: Timestamp | None
    duration_ms: Annotated[float, Field(ge=0)] | None
    status: Literal["ok", "failed", "refused", "skipped"]
    input_hashes: dict[str, Sha256]
    outputs: dict[str, Any]
    decision: Decision | None
    error: str | None
    attempt: Omit[Annotated[int, Field(ge=1)]] = None


class Guard(Document):
    """What the scope guard said of a proposal."""

    SCHEMA = "trail#/$defs/proposal/properties/guard"

    allowed: bool
    reasons: list[str]
    warnings: Omit[list[str]] = None


class LlmCall(Document):
    """One call to a language model for a proposal."""

    SCHEMA = "trail#/$defs/proposal/properties/llm_calls/items"

    model: str
    prompt_tokens: Annotated[int, Field(ge=0)] | None
    completion_tokens: Annotated[int, Field(ge=0)] | None
    latency_ms: Annotated[float, Field(ge=0)]
    error: str | None = None


class Proposal(Document):
    """A candidate patch, who proposed it, and what the scope guard said."""

    SCHEMA = "trail#/$defs/proposal"

    id: NonEmpty
    proposer: Literal["recipe", "llm"]
    diff: str
    guard: Guard
    recipe: str | None = None
    diff_sha256: Omit[Sha256] = None
    files: Omit[list[str]] = None
    llm_calls: Omit[list[LlmCall]] = None


class Scope(Document):
    """The files a patch may touch: an allow glob and no deny glob (deny wins)."""

    SCHEMA = "trail#/properties/scope"

    allow: Annotated[list[NonEmpty], Field(min_length=1)]
    deny: list[NonEmpty]


class MergeRequest(Document):
    """The merge request the flow publishes to."""

    SCHEMA = "trail#/properties/merge_request"

    project: Omit[str] = None
    iid: Omit[Annotated[int, Field(ge=1)]] = None
    web_url: Omit[str] = None


class TrailSandbox(Document):
    """How code of the checkouts under repair ran (`flows.sandbox`); mode ``none`` is --unsandboxed."""

    mode: Literal["bubblewrap+user", "bubblewrap", "user", "none"]
    description: str


class TrailDocument(Document):
    """``trail.json``: one flow run, rewritten after every checkpoint (outcome "interrupted" until it ends)."""

    SCHEMA = "trail"

    schema_: Literal["acklab/trail/v1"] = Field(alias="schema")
    flow: NonEmpty
    run_id: RunId
    started_at: Timestamp
    scope: Scope
    expected_head_sha: Annotated[str, Field(pattern=r"^[0-9a-f]{7,64}$")] | None
    checkpoints: list[Checkpoint]
    proposals: list[Proposal]
    outcome: Outcome
    exit_code: Annotated[int, Field(ge=0, le=7)]
    ended_at: Timestamp | None = None
    target: Omit[str] = None
    spec_sha256: Omit[Sha256] = None
    merge_request: MergeRequest | None = None
    outcome_detail: Omit[str] = None
    sandbox: Omit[TrailSandbox] = None


# -- what the repair flow records in a checkpoint's outputs ------------------------------


class LabLatency(Document):
    """p50 and p95 (nearest rank, `latency.percentile`) of an experiment's answered deliveries."""

    p50_ms: float
    p95_ms: float
    deliveries: Annotated[int, Field(ge=0)]


class LabExperiment(Document):
    """One experiment of a lab run the flow made: verdict, violations (a count), incident, latency."""

    name: str
    verdict: str
    trials: int
    violations: int
    incident: str | None
    latency: LabLatency | None
    reason: Omit[str] = None


class LabRunOutputs(Document):
    """A lab run of the flow (reproduce, verify, each side of strike-again): its id, bundle, verdicts."""

    lab_run_id: str
    lab_bundle: str | None
    verdict: str
    experiments: list[LabExperiment]
    handler_module: str

    @classmethod
    def within(cls, outputs: object) -> Self | None:
        """The lab run among a checkpoint's outputs (its own keys stand beside the run's); None: none."""
        if not isinstance(outputs, Mapping) or "lab_run_id" not in outputs:
            return None
        return cls.read_or_problems({k: outputs[k] for k in cls.model_fields if k in outputs})[0]


class StrikeComparison(Document):
    """One experiment before and after the patch; ``status`` held, gap or regression."""

    experiment: str
    status: Literal["held", "gap", "regression"]
    before: str | None
    after: str
    violations_after: int
    latency_before: LabLatency | None
    latency_after: LabLatency | None


class CheckReport(Document):
    """What a pytest check's JUnit report held."""

    tests: int
    passed: int
    collected_at_head: int
    junit: str | None


class CheckRecord(Document):
    """One verify command: what ran, how it ended, where its log is (and why it failed)."""

    name: str
    argv: list[str]
    status: Literal["ok", "failed"]
    exit_code: int
    duration_ms: float
    log: str
    report: Omit[CheckReport] = None
    reasons: Omit[list[str]] = None
