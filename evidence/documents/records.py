"""What a trial records: deliveries, effects observations, commit confirmations, violations, fault proofs.

Each mirrors a ``$defs`` object of ``common.schema.json``. The harness builds them as the
trial runs (`acklab.harness.wire.records` keeps the live state of a delivery and hands out a
`Delivery` when asked); verdicts, the console and the repair flow read them back from here.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, get_args

from pydantic import Field

from .base import Document, Omit
from .outcomes import Outcome, legacy_outcomes
from .verdicts import Invariant

Timestamp = str  # RFC 3339 with a timezone (`evidence.validate` checks the format)
Sha256 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
Count = Annotated[int, Field(ge=0)]
DeliveryKind = Literal[
    "original",
    "retry",
    "duplicate",
    "conflict",
    "replay-stale",
    "replay-tampered",
    "replay-foreign-secret",
    "replay-cross-wired",  # an unsigned event naming one order's charge and another's payment intent
    "replay-expired-secret",  # signed only with the secret a key rotation retired
    "probe",
    "competitor",  # the app's own request (race-with-request), not a webhook
]
ObservationSource = Literal["sql", "http", "fixture", "callable"]
# Where an effect is seen beside the database's rows: the sinks the lab runs (a new sink adds its
# source here, and its count to `Observation`).
SinkSource = Literal["emails", "calls"]
SINK_SOURCES: tuple[SinkSource, ...] = get_args(SinkSource)
EffectSource = Literal["rows"] | SinkSource  # where an effect is seen: the database, a sink
# Deliveries that bring the event itself (not a conflicting body, not a forged replay).
DELIVERED_KINDS = frozenset({"original", "retry", "duplicate"})


def is_faulted(fault: object) -> bool:
    """Whether a delivery's ``fault`` names one (``none`` and empty do not)."""
    return isinstance(fault, str) and fault not in ("", "none")


class Delivery(Document):
    """One HTTP attempt the lab sent, as the sender saw it and as the handler answered."""

    SCHEMA = "common#/$defs/delivery"

    seq: Count
    event_id: str
    attempt: Annotated[int, Field(ge=1)]
    kind: DeliveryKind
    fault: str
    sent_at: Timestamp
    latency_ms: Annotated[float, Field(ge=0)]
    status: int | None
    sender_status: int | None
    error: str | None
    headers: dict[str, str]
    body_sha256: Sha256
    response_excerpt: Annotated[str, Field(max_length=2000)] | None = None
    response_bytes: Omit[Count] = None
    response_sha256: Omit[Sha256] = None
    response_truncated: Omit[bool] = None
    service_ready: Omit[bool] = None
    replica: Omit[Count] = None
    sender_outcome: Omit[Outcome] = None
    handler_outcome: Omit[Outcome] = None

    @property
    def sender_saw(self) -> Outcome:
        """How the sender saw the attempt end (a bundle from before outcomes: read from its error text)."""
        if self.sender_outcome is not None:
            return self.sender_outcome
        return legacy_outcomes(self.status, self.sender_status, self.error)[0]

    @property
    def handler_gave(self) -> Outcome:
        """How the handler's side of the attempt ended (older bundles: read from the error text)."""
        if self.handler_outcome is not None:
            return self.handler_outcome
        return legacy_outcomes(self.status, self.sender_status, self.error)[1]

    @property
    def acknowledged(self) -> bool:
        """The handler answered 2xx (whatever the sender saw)."""
        return self.status is not None and 200 <= self.status < 300

    @property
    def received(self) -> bool:
        """The sender received a 2xx: the acknowledgement as the provider sees it (a synthetic
        504 of lost-ack, a reset or a timeout is no acknowledgement, whatever the handler did)."""
        return self.sender_status is not None and 200 <= self.sender_status < 300

    @property
    def sender_timed_out(self) -> bool:
        """The sender gave up waiting for the answer (its timeout, or the lab's per-delivery bound)."""
        return self.sender_status is None and self.sender_saw == "timed-out"

    @property
    def faulted(self) -> bool:
        """A fault was applied to this attempt."""
        return is_faulted(self.fault)

    @property
    def answered_ms(self) -> float | None:
        """The handler's latency, when the handler answered (`latency.answered_latency`'s rule)."""
        return self.latency_ms if self.status is not None else None


class Observation(Document):
    """An effects count read back from the target's database."""

    SCHEMA = "common#/$defs/observation"

    at: Timestamp
    event_id: str
    effects: Count
    source: ObservationSource
    after_seq: int | None
    note: Omit[str] = None
    state: Omit[Annotated[str, Field(max_length=500)]] = None
    object_id: Omit[str] = None  # the object read (:object_id), beyond one event
    # Effects outside the database (harness.sinks), read with the rows.
    emails: Omit[Count] = None
    calls: Omit[Count] = None
    call_keys: Omit[Annotated[list[Annotated[str, Field(max_length=200)] | None], Field(max_length=20)]] = (
        None
    )
    sent_before_commit: Omit[Count] = None
    # expect.totals: the consumer's running total for the event's object (None: no number read)
    total: float | int | None = None

    def count_of(self, source: str) -> int | None:
        """The count of `source` (a sink's, `SINK_SOURCES`) read with the rows; None: no such sink ran."""
        value = getattr(self, source) if source in SINK_SOURCES else None
        return value if isinstance(value, int) else None

    @property
    def sinks_seen(self) -> bool:
        """Whether any sink's count was read with the rows (the target runs sinks)."""
        return any(self.count_of(source) is not None for source in SINK_SOURCES)


class CommitConfirmation(Document):
    """lost-ack: the lab saw the handler's commit before handing the sender a synthetic status."""

    SCHEMA = "common#/$defs/commit_confirmation"

    seq: int
    confirmed: bool
    effects: int
    observed_at: Timestamp
    synthetic_status: int


class ViolationDelivery(Document):
    """The delivery that caused a violation."""

    SCHEMA = "common#/$defs/violation/properties/delivery"

    seq: Count
    kind: str
    attempt: Omit[Annotated[int, Field(ge=1)]] = None


class Violation(Document):
    """One broken invariant: the event, what was observed against what was expected, and why."""

    SCHEMA = "common#/$defs/violation"

    invariant: Invariant
    source: Omit[EffectSource] = None  # at-most-once-effect: rows, emails or calls
    event_id: str
    observed: int | str | None
    expected: str
    detail: str
    trial: Omit[str] = None
    delivery: Omit[ViolationDelivery] = None

    def describe(self) -> str:
        """One line: invariant, event, observed vs expected (and which effects: rows, emails, calls)."""
        return f"{self.invariant} on event {self.event_id}: {observed_text(self.observed, self.source, self.expected)}"


def observed_text(observed: int | str | None, source: str | None, expected: str | None = None) -> str:
    """``observed 16 emails, expected <= 1``: the number says what it counts when a source is known."""
    counted = f"{observed} {source}" if source and isinstance(observed, int) else f"{observed}"
    return f"observed {counted}" + (f", expected {expected}" if expected is not None else "")


class FaultTry(Document):
    """One try of a trial's fault on fresh events: did it land, and what shows it."""

    SCHEMA = "common#/$defs/trial/properties/fault/properties/tries/items"

    try_: Annotated[int, Field(alias="try", ge=1)]
    event_ids: list[str]
    landed: bool
    evidence: str
    facts: Omit[dict[str, Any]] = None


class FaultProof(Document):
    """A trial's ``fault``: its name, whether some try landed, and every try."""

    SCHEMA = "common#/$defs/trial/properties/fault"

    name: str
    landed: bool
    tries: list[FaultTry]

    @classmethod
    def of(cls, name: str, tries: list[FaultTry]) -> FaultProof:
        return cls(name=name, landed=any(t.landed for t in tries), tries=tries)

    @property
    def proving_try(self) -> FaultTry | None:
        """The try the proof rests on: the one that landed, else the last."""
        return next((t for t in self.tries if t.landed), self.tries[-1] if self.tries else None)


JobStepName = Literal[
    "enqueued",
    "taken",
    "acknowledged",
    "requeued",
    "frozen",
    "thawed",
    "killed",
    "restarted",
    "refused",
    "broker-restarted",
    "done",
]


class JobStep(Document):
    """One step of a job's life beside its delivery: what the broker saw (enqueued, taken by which
    worker, requeued, acknowledged) and what the lab did to it (froze or killed its worker, restarted
    the broker, refused the enqueue); docs/queues.md."""

    SCHEMA = "common#/$defs/job_step"

    at: Timestamp
    event_id: str | None
    step: JobStepName
    by: Literal["broker", "lab"]
    worker: Omit[str] = None
    detail: Omit[str] = None


class LateRead(Document):
    """The re-read of every event's effects at the end of the run, before any service stopped."""

    SCHEMA = "common#/$defs/trial/properties/late_read"

    at: Timestamp
    error: str | None = None
    grew: Omit[list[str]] = None
