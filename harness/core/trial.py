"""One trial in progress: it delivers like the provider would, observes, and keeps the records.

Experiments call `send` (one attempt), `deliver` (an attempt and the provider's retries
until the sender sees a 2xx), `observe`, `settle` (wait for quiescence and for the effects
to settle, then read them) and `prove` (what shows that a try's fault landed). Everything
sent or read is recorded; verdicts are computed later from the records alone
(`harness.core.verdicts`).

Effects settle by the target's clock: a count is final once it reads the same over the
settle window (``settings.settle_ms``) *and* ``expect.effects_within_s`` has passed since
the last answer of the event's deliveries — an ack-then-process consumer writes its effect
after its 2xx, and a count taken before then would judge a half-done event. An app the lab
serves in its own process is watched instead of waited for: once it is idle — no call into
it running, no task it started pending (`harness.targets.activity`) — one read is final.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import httpx

from acklab.evidence.clock import utcnow
from acklab.evidence.documents.objects import ObjectCase
from acklab.evidence.documents.records import (
    CommitConfirmation,
    FaultProof,
    FaultTry,
    JobStep,
    JobStepName,
    Observation,
)
from acklab.harness.core.lab import Lab
from acklab.harness.core.plan import TrialPlan
from acklab.harness.core.proofs import Proof, try_record
from acklab.harness.sinks import Sinks
from acklab.harness.targets.state import read_together
from acklab.harness.wire.balancer import RECORD, REPLICA
from acklab.harness.wire.faults import Fault, NoFault
from acklab.harness.wire.records import DeliveryRecord
from acklab.harness.wire.signing import SIGNERS, Attempt, redact_headers, rotated
from acklab.harness.wire.templates import WebhookEvent, render
from acklab.harness.wire.transports import TICKET, Ticket

CONFIRM_WINDOW_S = 2.0
# How often the lab looks whether an app it serves in its own process went idle while settling.
IDLE_POLL_S = 0.002
STOP_RETRYING = frozenset({410})  # Standard Webhooks: 410 Gone disables the endpoint


def sender_acked(record: DeliveryRecord) -> bool:
    """The sender stops retrying: it saw a 2xx, or a status that tells the provider to stop."""
    status = record.sender_status
    return status is not None and (200 <= status < 300 or status in STOP_RETRYING)


class TrialContext:
    """Delivers, observes and records for one trial of one experiment."""

    def __init__(
        self,
        lab: Lab,
        plan: TrialPlan,
        *,
        on_delivery: Callable[[DeliveryRecord], None] | None = None,
        on_observation: Callable[[Observation], None] | None = None,
    ) -> None:
        self.lab, self.plan = lab, plan
        self.deliveries: list[DeliveryRecord] = []
        self.observations: list[Observation] = []
        self.confirmations: list[CommitConfirmation] = []
        self.parameters: dict[str, Any] = {}
        self.errors: list[str] = []
        self.unjudged: set[str] = set()  # planned events the trial never needed (never sent)
        self.tries: list[FaultTry] = []  # the fault's proof, per try
        self.objects: list[ObjectCase] = []  # beyond one event: the objects played (harness.core.objects)
        self._events: dict[int, WebhookEvent] = {}
        self._objects: dict[str, str] = {}  # event id -> its object (:object_id)
        self._on_delivery, self._on_observation = on_delivery, on_observation
        self._started = datetime.now(UTC)
        self._started_mono = time.monotonic()
        self._lab_steps: list[
            tuple[float, JobStep]
        ] = []  # what the lab did to the queue (harness.experiments.queues)
        self._unread_at: int | None = None  # where in `errors` the sinks' unkept records are told

    # -- events ------------------------------------------------------------------------

    def event(self, k: int) -> WebhookEvent:
        """The trial's k-th event, rendered once (so every retry resends the same bytes)."""
        if k not in self._events:
            target = self.lab.target
            self._events[k] = self.remember(
                render(
                    target.template,
                    event_id=self.plan.event_ids[k],
                    order_id=self.plan.order_ids[k],
                    seq=self.plan.index * 100 + k,
                    created=datetime.fromtimestamp(self.lab.endpoint.now(), UTC),
                    object_template=target.objects.object,
                    vary=target.varies,
                    avoid_amounts=tuple(v for v in target.conflict_set.values() if isinstance(v, int)),
                )
            )
        return self._events[k]

    def remember(self, event: WebhookEvent) -> WebhookEvent:
        """Note `event`'s object, so every read of its effects gets it as ``:object_id`` (and tell
        the sinks, so a message or call naming it counts for it)."""
        self._objects[event.event_id] = event.object_id
        sinks = self.lab.endpoint.sinks
        if sinks is not None:
            sinks.register(event.event_id, event.order_id, event.object_id)
        # The shop's own object first (prepare:), so the event names one it knows.
        self.lab.target.prepare_object(event.event_id, event.order_id, event.object_id)
        return event

    def object_of(self, event_id: str) -> str | None:
        return self._objects.get(event_id)

    def expect_total(self, events: Sequence[WebhookEvent]) -> None:
        """expect.totals: the running total the consumer must end with for the object of `events` — the
        newest's (the last of `events`, in the provider's order), recorded for ``totals-match``."""
        totals = self.lab.target.expect.totals
        if totals is None or not events:
            return
        newest = events[-1]
        self.parameters.setdefault("totals", {})[newest.object_id] = totals.of(newest.document)

    def emit(self, event: WebhookEvent) -> None:
        """The provider sent `event`: the objects it names exist in the provider's API (effects.provider_api)
        from now on, in this version. Genuine deliveries emit their event when first signed; a lifecycle
        emits its events in the provider's order before any is delivered (the provider's state is the
        newest, however they arrive)."""
        sinks = self.lab.endpoint.sinks
        if sinks is not None:
            sinks.emit(event.event_id, event.document, event.event_time)

    # -- delivering --------------------------------------------------------------------

    def _last_seq(self) -> int | None:
        return self.deliveries[-1].seq if self.deliveries else None

    def prepare(
        self,
        event: WebhookEvent,
        *,
        kind: str,
        attempt: int,
        fault: Fault,
        timestamp: int | None = None,
        secret: str | None = None,
        signed_body: bytes | None = None,
        replica: int | None = None,
        signed_with: Sequence[str] = (),
        skew_s: int = 0,
        unsigned: bool = False,
    ) -> tuple[httpx.Request, DeliveryRecord]:
        """Sign and build one attempt (not sent yet); `signed_body` differs from the sent body only when
        tampering; `replica`: the replica the balancer must send it to (topology.replicas).
        `signed_with`: several secrets, each signature in the provider's header in this order (a key
        rotation's overlap); `skew_s`: the signed timestamp this far from the provider's clock (a clock
        that is off); `unsigned`: no signature at all (a forger's). A delivery that is not forged (a
        ``replay-*`` kind) emits its event to the provider's API."""
        lab = self.lab
        # The provider's clock: the lab's, shifted with the consumer's when an experiment moved it.
        stamp = (int(lab.endpoint.now()) if timestamp is None else timestamp) + skew_s
        target = lab.target
        if not kind.startswith("replay-"):
            self.emit(event)
        signed = Attempt(
            event.event_id,
            target.event_type_of(event.document, event.type_header),
            signed_body or event.body,
            stamp,
            str(uuid.uuid4()),
            event.created_at,
        )
        # The provider's headers, then the spec's own (headers:, an API key, say).
        if unsigned:
            headers = target.delivery_headers(SIGNERS["none"], signed, "")
        elif signed_with:
            headers = rotated(
                target.scheme, [target.delivery_headers(lab.signer, signed, s) for s in signed_with]
            )
        else:
            headers = target.delivery_headers(lab.signer, signed, target.secret if secret is None else secret)
        # A retry says so where its provider does (Slack's X-Slack-Retry-Num and -Reason).
        headers.update(lab.profile.retry.headers(attempt, self._failure_of(event.event_id)))
        service = lab.endpoint.service_state()
        record = DeliveryRecord(
            seq=len(self.deliveries),
            event_id=event.event_id,
            attempt=attempt,
            kind=kind,
            fault=fault.name,
            headers=redact_headers(headers, also=target.headers),
            body=event.body,
            on_complete=self._on_delivery,
            service_at_send=service,
            service_now=lab.endpoint.service_state if service is not None else None,
        )
        self.deliveries.append(record)
        ticket = Ticket(record, fault, lab.target.timeout_s, confirm=self._confirm)
        extensions: dict[str, object] = {TICKET: ticket, RECORD: record}
        if replica is not None:
            extensions[REPLICA] = replica
        request = lab.client.build_request(
            "POST", lab.url, content=event.body, headers=headers, extensions=extensions
        )
        return request, record

    def _failure_of(self, event_id: str) -> str:
        """Why the event's last attempt failed as its sender felt it (whoever caused it: a reset the
        lab made is a failed connection to the provider), in `harness.wire.retry_policy.REASONS`' terms."""
        last = next((d for d in reversed(self.deliveries) if d.event_id == event_id), None)
        if last is None or last.sender_felt == "timed-out":
            return "timeout"
        return "error" if last.sender_felt == "answered" else "connect"

    def prepare_plain(
        self,
        event: WebhookEvent,
        *,
        method: str,
        url: str,
        body: bytes | None,
        headers: Mapping[str, str],
        kind: str,
    ) -> tuple[httpx.Request, DeliveryRecord]:
        """Build a request that is not a webhook (the app's own: race-with-request's competitor),
        recorded like a delivery under `event`'s id (not sent yet); `headers` are secrets."""
        sent = (
            {"Content-Type": "application/json", "User-Agent": "acklab", **headers} if body else {**headers}
        )
        service = self.lab.endpoint.service_state()
        record = DeliveryRecord(
            seq=len(self.deliveries),
            event_id=event.event_id,
            attempt=1,
            kind=kind,
            fault=NoFault.name,
            headers=redact_headers(sent, also=headers),
            body=body or b"",
            on_complete=self._on_delivery,
            service_at_send=service,
            service_now=self.lab.endpoint.service_state if service is not None else None,
        )
        self.deliveries.append(record)
        ticket = Ticket(record, NoFault(), self.lab.target.timeout_s)
        request = self.lab.client.build_request(
            method, url, content=body, headers=sent, extensions={TICKET: ticket}
        )
        return request, record

    async def transmit(self, request: httpx.Request, record: DeliveryRecord) -> DeliveryRecord:
        """Send a prepared attempt; the sender's view lands in the record, never raises."""
        try:
            response = await self.lab.client.send(request)
            await response.aclose()
        except httpx.HTTPError as exc:
            record.finish_sender(status=None, failure=exc)
        else:
            record.finish_sender(status=response.status_code)
        return record

    async def send(
        self, event: WebhookEvent, *, kind: str, attempt: int = 1, fault: Fault | None = None, **how: Any
    ) -> DeliveryRecord:
        request, record = self.prepare(event, kind=kind, attempt=attempt, fault=fault or NoFault(), **how)
        return await self.transmit(request, record)

    async def deliver(
        self,
        event: WebhookEvent,
        *,
        first_fault: Fault | None = None,
        kind: str = "original",
        after_first: Callable[[DeliveryRecord], None] | None = None,
        **how: Any,
    ) -> list[DeliveryRecord]:
        """Attempt 1 (with `first_fault`), then the provider's retries until the sender sees a 2xx.

        Attempt n is sent at the compressed schedule's n-th offset from the first attempt, and
        never before the sender is done with attempt n-1. A fresh signature each time; the
        same body bytes and event id. `after_first` is called once attempt 1 is done (a fault of the
        provider's own lifted before its retries); `how` signs every attempt (`prepare`).
        """
        started = time.monotonic()
        first = await self.send(event, kind=kind, attempt=1, fault=first_fault or NoFault(), **how)
        if after_first is not None:
            after_first(first)
        return [first, *await self.retry_until_acked(event, started=started, first=first, how=how)]

    async def retry_until_acked(
        self,
        event: WebhookEvent,
        *,
        started: float,
        first: DeliveryRecord,
        how: Mapping[str, Any] | None = None,
    ) -> list[DeliveryRecord]:
        """Attempts 2..N at the schedule's offsets from ``started`` (when attempt 1 was sent), until
        the sender sees a 2xx (or a status that stops the provider retrying): the sender's one
        retry loop, whatever struck attempt 1."""
        schedule = self.lab.schedule
        attempts = min(len(schedule), self.lab.settings.max_attempts)
        sent: list[DeliveryRecord] = []
        last = first
        for n in range(2, attempts + 1):
            if sender_acked(last):
                break
            delay = started + schedule[n - 1] - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            last = await self.send(event, kind="retry", attempt=n, **(how or {}))
            sent.append(last)
        return sent

    @property
    def confirm_window_s(self) -> float:
        """lost-ack: how long the lab looks for the commit after the 2xx (ack-then-process: longer;
        behind a queue: until it drained)."""
        queue = self.lab.endpoint.queue
        drained = queue.drained_within_s if queue is not None else 0.0
        return max(CONFIRM_WINDOW_S, self.lab.target.expect.effects_within_s, drained)

    def confirmation(self, seq: int) -> CommitConfirmation | None:
        return next((c for c in self.confirmations if c.seq == seq), None)

    async def _confirm(self, record: DeliveryRecord, synthetic_status: int) -> bool:
        """lost-ack: read the effects back until the handler's commit shows (or the window ends)."""
        deadline = time.monotonic() + (self.confirm_window_s if record.acknowledged else 0)
        while True:
            effects = await self.lab.endpoint.probe.count(record.event_id, self.object_of(record.event_id))
            if effects >= 1 or time.monotonic() >= deadline:
                break
            await asyncio.sleep(0.01)
        now = utcnow()
        self.confirmations.append(
            CommitConfirmation(
                seq=record.seq,
                confirmed=effects >= 1,
                effects=effects,
                observed_at=now,
                synthetic_status=synthetic_status,
            )
        )
        self._record(self._observation(record.event_id, effects, record.seq, "commit-confirmation", at=now))
        return effects >= 1

    # -- observing ---------------------------------------------------------------------

    def _record(self, observation: Observation) -> Observation:
        self.observations.append(observation)
        if self._on_observation is not None:
            self._on_observation(observation)
        return observation

    def _observation(
        self,
        event_id: str,
        effects: int,
        after_seq: int | None,
        note: str,
        *,
        at: str | None = None,
        state: str | None = None,
    ) -> Observation:
        self._note_unread()
        return with_sinks(
            Observation(
                at=at or utcnow(),
                event_id=event_id,
                effects=effects,
                source=self.lab.endpoint.probe.source,
                after_seq=after_seq,
                note=note,
                state=state,
                object_id=self.object_of(event_id),
            ),
            self.lab.endpoint.sinks,
        )

    def _note_unread(self) -> None:
        """A trial whose sinks could not keep everything since it started is an error (unless it
        proved a violation): its counts are whole, its evidence is not."""
        sinks = self.lab.endpoint.sinks
        why = sinks.unread_since(self._started) if sinks is not None else None
        if why is None:
            return
        if self._unread_at is None:
            self._unread_at = len(self.errors)
            self.errors.append(why)
        else:
            self.errors[self._unread_at] = why

    async def observe(
        self, event: WebhookEvent, note: str, *, state: bool = False, after_seq: int | None = None
    ) -> Observation:
        """Read `event`'s effects now (and its state, with `state`) and record them as `note`,
        following delivery `after_seq` (default: the last one sent)."""
        endpoint, object_id = self.lab.endpoint, self.object_of(event.event_id)
        # Count and state in one read (one transaction where both are SQL on one database).
        effects, read = await read_together(
            endpoint.probe, endpoint.state if state else None, event.event_id, object_id
        )
        follows = self._last_seq() if after_seq is None else after_seq
        return self._record(self._observation(event.event_id, effects, follows, note, state=read))

    def _quiet_since(self, event_id: str) -> float:
        """When the event's last delivery stopped being able to start work (answered, or sent)."""
        moments = [m for d in self.deliveries if d.event_id == event_id and (m := d.settled_mono) is not None]
        return max(moments, default=time.monotonic())

    async def _stable_count(self, event_id: str) -> int:
        """The count once `effects_within_s` has passed since the event's last answer and it
        reads the same over the settle window (bounded by the horizon)."""
        step = self.lab.settings.settle_ms / 2000
        queue = self.lab.endpoint.queue
        if queue is not None:  # behind a queue: the count is final once every job is done
            why = await queue.wait_drained(step)
            if why is not None:
                self.errors.append(f"{event_id}: {why}")
        within_s = self.lab.target.expect.effects_within_s
        wait = self._quiet_since(event_id) + within_s - time.monotonic()
        if wait > 0:
            await asyncio.sleep(wait)
        deadline = time.monotonic() + self.lab.horizon_s
        object_id = self.object_of(event_id)
        sinks = self.lab.endpoint.sinks

        async def read() -> tuple[int, tuple[int, ...]]:
            # The sinks settle with the rows: a worker's email a moment later still counts.
            rows = await self.lab.endpoint.probe.count(event_id, object_id)
            return rows, (sinks.tally(event_id).total() if sinks is not None else ())

        activity = self.lab.endpoint.activity
        reads: list[tuple[int, tuple[int, ...]]] = []
        next_read = time.monotonic()
        while True:
            if activity is not None and activity.idle():
                # Nothing the app was handed is still running where the lab can see it: the
                # count cannot move any more, read once (harness.targets.activity).
                return (await read())[0]
            now = time.monotonic()
            if now >= next_read:
                reads.append(await read())
                if len(reads) >= 3 and len(set(reads[-3:])) == 1:
                    return reads[-1][0]
                next_read = now + step
            if time.monotonic() > deadline:
                self.errors.append(f"effects of {event_id} never settled: read {[r[0] for r in reads[-3:]]}")
                return reads[-1][0]
            # Watching an app: look again soon (it may finish at any moment); else the next read.
            await asyncio.sleep(min(IDLE_POLL_S, step) if activity is not None else step)

    async def settle(self, events: Iterable[WebhookEvent], note: str = "final") -> None:
        """Quiescence: wait until no delivery is in flight and the effects stop moving; then observe."""
        if not await self.lab.transport.quiesce(self.lab.horizon_s):
            self.errors.append(
                f"{self.lab.transport.inflight} deliveries still in flight after {self.lab.horizon_s:.0f} s; "
                "the handler never answered them"
            )
        events = list(events)
        counts = await asyncio.gather(*(self._stable_count(e.event_id) for e in events))
        state_probe = self.lab.endpoint.state
        if state_probe is None:
            states: list[str | None] = [None] * len(events)
        else:
            # The observation is one read: the settled count read again with its state, together.
            both = await asyncio.gather(
                *(
                    read_together(
                        self.lab.endpoint.probe, state_probe, e.event_id, self.object_of(e.event_id)
                    )
                    for e in events
                )
            )
            counts, states = [c for c, _ in both], [s for _, s in both]
        last = self._last_seq()
        totals = await self._totals(events)
        for event, effects, state, total in zip(events, counts, states, totals, strict=True):
            seen = self._observation(event.event_id, effects, last, note, state=state)
            self._record(seen.but(total=total) if self.lab.endpoint.totals is not None else seen)

    async def _totals(self, events: list[WebhookEvent]) -> list[float | int | None]:
        """expect.totals.sum for each event's object (None everywhere without expect.totals)."""
        probe = self.lab.endpoint.totals
        if probe is None:
            return [None] * len(events)
        return list(
            await asyncio.gather(*(probe.read(e.event_id, self.object_of(e.event_id)) for e in events))
        )

    # -- a job's life (a consumer behind a queue) ------------------------------------------

    def job_step(
        self, event: WebhookEvent, step: JobStepName, *, worker: str | None = None, detail: str | None = None
    ) -> None:
        """Record what the lab did to `event`'s job (froze or killed its worker, restarted the broker...)."""
        self._lab_steps.append(
            (
                time.monotonic(),
                JobStep(
                    at=utcnow(), event_id=event.event_id, step=step, by="lab", worker=worker, detail=detail
                ),
            )
        )

    def jobs(self) -> list[JobStep] | None:
        """Each job's life during this trial, the broker's steps and the lab's in order; a broker step
        belongs to the event of the last delivery sent before it. None: no queue to follow."""
        queue = self.lab.endpoint.queue
        if queue is None:
            return None
        sent = sorted((d.sent_mono, d.event_id) for d in self.deliveries if d.sent_mono is not None)
        found = list(self._lab_steps)
        for seen in queue.steps_since(self._started_mono):
            owner = next((e for at, e in reversed(sent) if at <= seen.at_mono), None)
            at = (
                datetime.fromtimestamp(seen.at_unix, UTC)
                .isoformat(timespec="microseconds")
                .replace("+00:00", "Z")
            )
            detail = f"{', '.join(seen.commands)} on {', '.join(seen.keys)}"
            found.append(
                (
                    seen.at_mono,
                    JobStep(
                        at=at, event_id=owner, step=seen.step, by="broker", worker=seen.worker, detail=detail
                    ),
                )
            )
        return [step for _, step in sorted(found, key=lambda f: f[0])]

    # -- proving the fault -------------------------------------------------------------

    def prove(self, events: Iterable[WebhookEvent], proof: Proof) -> Proof:
        """Record whether this try's fault landed (and what shows it)."""
        self.tries.append(try_record(len(self.tries) + 1, [e.event_id for e in events], proof))
        return proof

    def fault(self, name: str) -> FaultProof | None:
        """The trial record's ``fault`` (None when the experiment proved nothing, e.g. it never ran)."""
        return FaultProof.of(name, self.tries) if self.tries else None


def with_sinks(observation: Observation, sinks: Sinks | None) -> Observation:
    """`observation` with what the sinks received for its event so far (unchanged without sinks)."""
    if sinks is None:
        return observation
    tally = sinks.tally(observation.event_id)
    return observation.but(
        **tally.counts,
        # keys only where the API names its header: without one, idempotent-outbound is not judged
        call_keys=list(tally.keys) if tally.keys is not None else None,
        sent_before_commit=tally.before_commit,
    )
