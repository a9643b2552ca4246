"""A delivery while it happens: both sides of one HTTP attempt, until each has finished.

A delivery has two sides that finish at different times: what the simulated *sender*
saw (``sender_status``; under a fault a synthetic 504, a reset or a timeout) and what
the *handler* answered (``status``, filled in when its answer reaches the lab, possibly
long after the sender gave up). Verdicts read both: an acknowledgement is a 2xx the sender
received (``eventually-acknowledged``), an effect is owed to every 2xx the handler answered
(``acked-exactly-once``).

Each side ends with an outcome (`Outcome`: answered, timed-out, reset, refused, cut-by-lab,
no-answer, error), classified once here from what happened (`outcome_of`); verdicts read the
outcomes, the error text is for people.

When both sides are done, `DeliveryRecord.document` is what the trial records: a
`Delivery` of `acklab.evidence.documents` (where observations and commit confirmations,
which are complete when they are made, are built directly).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import httpx

from acklab.evidence.clock import utcnow
from acklab.evidence.documents.outcomes import Outcome
from acklab.evidence.documents.records import Delivery

if TYPE_CHECKING:
    from acklab.harness.wire.bodies import CappedBody

EXCERPT_CHARS = 500


def outcome_of(failure: BaseException, *, sender: bool) -> Outcome:
    """How a side of an attempt that got no status ended, from the exception that ended it.

    The sender's view: any timeout is ``timed-out`` (it stopped waiting, whatever for). The
    handler's: a connection that could not be opened is ``refused`` (timed out or not), a read or
    write that timed out is ``timed-out`` (the lab's bound per delivery)."""
    if sender and isinstance(failure, httpx.TimeoutException):
        return "timed-out"
    if isinstance(failure, httpx.ConnectError | httpx.ConnectTimeout):
        return "refused"
    if isinstance(failure, httpx.TimeoutException):
        return "timed-out"
    if isinstance(failure, httpx.RemoteProtocolError | httpx.ReadError | httpx.WriteError):
        return "reset"
    return "error"


def _words(failure: BaseException) -> str:
    return f"{type(failure).__name__}: {failure}" if str(failure) else type(failure).__name__


@dataclass
class DeliveryRecord:
    """One HTTP attempt while it happens; `document` is what the trial records of it."""

    seq: int
    event_id: str
    attempt: int
    kind: str
    fault: str
    headers: dict[str, str]
    body: bytes = field(repr=False)
    sent_at: str = ""
    latency_ms: float = 0.0
    status: int | None = None
    sender_status: int | None = None
    handler_error: str | None = None
    sender_error: str | None = None
    handler_outcome: Outcome | None = None
    sender_outcome: Outcome | None = None
    # The lab's own fault ended the exchange for the sender (`Exchange.cut`): its outcome is cut-by-lab.
    cut_by_lab: bool = False
    # How the sender felt the end of the exchange, whoever caused it (a reset the lab made is a failed
    # connection to a provider): what a provider's retry gives as its reason.
    sender_felt: Outcome | None = None
    response_excerpt: str | None = None
    response_body: CappedBody | None = field(default=None, repr=False)
    handler_done: bool = False
    sender_done: bool = False
    on_complete: Callable[[DeliveryRecord], None] | None = field(default=None, repr=False)
    # Monotonic clock readings (never written): when the lab handed the request to the
    # transport, when its last byte was written, and when the handler's answer arrived.
    sent_mono: float | None = field(default=None, repr=False)
    written_mono: float | None = field(default=None, repr=False)
    answered_mono: float | None = field(default=None, repr=False)
    # When the handler says the request entered it (its ``x-acklab-entered-ns`` answer header,
    # monotonic ns; the fixture and the bench's racy handler send it): a burst's arrival spread.
    handler_entered_ns: int | None = field(default=None, repr=False)
    # When the server says it had read the whole request (``x-acklab-received-ns``, the fixture).
    server_received_ns: int | None = field(default=None, repr=False)
    # The lab's own service (command:): its (ready, starts) when the attempt was prepared,
    # and how to read them again when the answer arrives. None: the lab runs no service.
    service_at_send: tuple[bool, int] | None = field(default=None, repr=False)
    service_now: Callable[[], tuple[bool, int] | None] | None = field(default=None, repr=False)
    service_ready: bool | None = None
    # Which replica of the consumer the balancer sent it to (topology.replicas; None: one process).
    replica: int | None = None

    @property
    def body_sha256(self) -> str:
        return hashlib.sha256(self.body).hexdigest()

    @property
    def acknowledged(self) -> bool:
        """The handler answered 2xx (whatever the sender saw)."""
        return self.status is not None and 200 <= self.status < 300

    def finish_handler(
        self,
        *,
        status: int | None,
        latency_ms: float,
        failure: BaseException | None = None,
        excerpt: str | None = None,
        body: CappedBody | None = None,
    ) -> None:
        """The handler's side: its status, or the `failure` that ended the exchange without one."""
        self.status, self.latency_ms = status, round(latency_ms, 3)
        self.handler_error = _words(failure) if failure is not None else None
        if status is not None:
            self.handler_outcome = "answered"
        else:
            self.handler_outcome = outcome_of(failure, sender=False) if failure is not None else "cut-by-lab"
        self.answered_mono = time.monotonic()
        if self.service_at_send is not None and self.service_now is not None:
            # Ready when sent and still the same ready process when answered: the answer is
            # the handler's, not a booting or restarting service's.
            self.service_ready = self.service_at_send[0] and self.service_now() == self.service_at_send
        self.response_excerpt = excerpt[:EXCERPT_CHARS] if excerpt is not None else None
        self.response_body = body
        self.handler_done = True
        self._maybe_complete()

    def finish_sender(self, *, status: int | None, failure: BaseException | None = None) -> None:
        """The sender's side: the status it got, or the `failure` that left it without one."""
        self.sender_status = status
        if status is not None:
            self.sender_error, self.sender_outcome = None, "answered"
            self.sender_felt = "answered"
        elif failure is None:
            self.sender_error, self.sender_outcome = None, "cut-by-lab"
        else:
            timed_out = isinstance(failure, httpx.TimeoutException)
            self.sender_error = f"timeout: {failure}" if timed_out else _words(failure)
            self.sender_felt = outcome_of(failure, sender=True)
            self.sender_outcome = "cut-by-lab" if self.cut_by_lab else self.sender_felt
        self.sender_done = True
        self._maybe_complete()

    def _maybe_complete(self) -> None:
        if self.handler_done and self.sender_done and self.on_complete is not None:
            callback, self.on_complete = self.on_complete, None
            callback(self)

    @property
    def error(self) -> str | None:
        parts = []
        if self.sender_error:
            parts.append(f"sender: {self.sender_error}")
        if self.handler_error:
            parts.append(f"handler: {self.handler_error}")
        elif not self.handler_done:
            parts.append("handler: no answer reached the lab")
        return "; ".join(parts) or None

    def document(self) -> Delivery:
        """The delivery as the trial records it (`acklab.evidence.documents.records.Delivery`)."""
        body = self.response_body
        return Delivery(
            seq=self.seq,
            event_id=self.event_id,
            attempt=self.attempt,
            kind=self.kind,  # type: ignore[arg-type]  # the lab's own kinds, checked by the model
            fault=self.fault,
            sent_at=self.sent_at or utcnow(),
            latency_ms=self.latency_ms,
            status=self.status,
            sender_status=self.sender_status,
            error=self.error,
            headers=self.headers,
            body_sha256=self.body_sha256,
            response_excerpt=self.response_excerpt,
            # What the lab read of the answer: its size, its hash, and whether it stopped early.
            response_bytes=body.read if body is not None else None,
            response_sha256=body.sha256 if body is not None else None,
            response_truncated=body.truncated if body is not None else None,
            service_ready=self.service_ready,
            replica=self.replica,
            # A side the lab stopped waiting for before it ended (the trial was over) was cut by the lab.
            sender_outcome=self.sender_outcome or "cut-by-lab",
            handler_outcome=self.handler_outcome or "cut-by-lab",
        )

    @property
    def settled_mono(self) -> float | None:
        """When this attempt stopped being able to cause work: its answer, else its sending."""
        return self.answered_mono if self.answered_mono is not None else self.sent_mono
