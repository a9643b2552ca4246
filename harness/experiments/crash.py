"""The handler's process dies mid-delivery: ``crash-after-commit`` and ``crash-mid-transaction``.

Both ask for the target's ``process`` capability (`harness.targets.capabilities`): a target
without one is listed skipped with its reason. A ``hooked`` process (the built-in fixture, run
as a process of its own on the target's database) is killed with SIGKILL like this:

* ``crash-after-commit``: the fixture starts with its lab-only crash hook, which SIGKILLs
  the process after the handler's transaction committed and before the response is
  written. The sender sees the connection drop; the lab restarts the fixture (hook off),
  the sender retries, and the effects must still be exactly one.
* ``crash-mid-transaction``: the fixture starts with simulated work inside the
  transaction; once the lab sees that transaction open in the database it SIGKILLs the
  process. Nothing may be left half-written: the retry produces exactly one effect.

Effects are read straight from the database, since the fixture is dead part of the time.

A ``killable`` process (a target spec's ``command:``) is a service the lab starts itself but
cannot hook. For
``crash-after-commit`` the lab reads the effects probe in a tight loop while the delivery
is in flight and SIGKILLs the service's process group as soon as the effect shows; then it
records which happened: ``killed-after-commit-before-response`` (the sender got no answer:
the strike landed), ``killed-after-answer`` (a fast service answered before the probe showed
its commit: the lab withheld that answer from the sender — it never reaches the sender's
retry logic — killed the group and restarted it, so in-memory state is lost and the retry
lands on a fresh process: landed too) or ``response-arrived-first`` (neither happened).
With sinks (``effects.smtp``/``effects.outbound``) the first email or effect call for the
event counts like the commit: a consumer that tells the world before it commits is killed
there, between its send and its commit (``killed-after-send-before-commit``), which is where
its crash costs a customer a second email — the retry sends again.
A missed strike is tried again on a fresh event (`harness.core.proofs`); when none lands the
trial is an error, never a pass. The kill returns once the whole process group is gone
and the port is free (a multi-process server's workers outlive their master by a few
milliseconds); the restart waits for readiness (``command.ready``) before the sender
retries. A service that does not come back makes that trial an error naming the cause,
and later trials are not sent into it. An ``effects.http`` probe served by the killed
service itself is read after the restart, never while it is down.
``crash-mid-transaction`` needs a hooked process: the lab cannot see when a service it does not
know has its transaction open.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import time
from typing import ClassVar

from acklab.harness.core.plan import PlannedDelivery, RunSettings
from acklab.harness.core.proofs import Proof, landed, missed
from acklab.harness.core.trial import TrialContext
from acklab.harness.errors import HarnessError
from acklab.harness.experiments.base import Experiment, retry_plan
from acklab.harness.experiments.struck import (
    CrashAfterCommit,
    CrashMidTransaction,
    WithheldAnswer,
)
from acklab.harness.targets import Endpoint, Needs, Target
from acklab.harness.targets.capabilities import HookedProcess, ProcessControl
from acklab.harness.targets.inflight import wait_in_transaction
from acklab.harness.wire.providers import ProviderProfile
from acklab.harness.wire.records import DeliveryRecord
from acklab.harness.wire.templates import WebhookEvent

CRASH_INVARIANTS = ("at-most-once-effect", "acked-exactly-once", "eventually-acknowledged")
MID_TRANSACTION_DELAY_MS = 400
CRASH_WAIT_S = 10.0
LANDED = "killed-after-commit-before-response"
MISSED = "response-arrived-first"
KILLED_AFTER_ANSWER = "killed-after-answer"
KILLED_AFTER_SEND = "killed-after-send-before-commit"
NO_COMMIT = "no-commit-seen"
STRIKES_LANDED = (LANDED, KILLED_AFTER_ANSWER, KILLED_AFTER_SEND)
ANSWERS_FIRST = (
    "crash-after-commit strikes between a commit and its answer, and this consumer answers first "
    "(expect.effects_within_s > 0): its risk is the work after the 2xx — run crash-after-ack"
)


def _hooked(trial: TrialContext) -> HookedProcess:
    process = trial.lab.endpoint.hooked
    if process is None:
        raise HarnessError(
            "a crash experiment ran without the hooked process it asked for (the lab served it another way)"
        )
    return process


async def _restart(
    process: HookedProcess, *, crash_after_commit: bool = False, processing_delay_ms: int = 0
) -> None:
    await asyncio.to_thread(process.kill)
    try:
        await asyncio.to_thread(
            functools.partial(
                process.start, crash_after_commit=crash_after_commit, processing_delay_ms=processing_delay_ms
            )
        )
    except HarnessError as exc:
        process.down_reason = f"the fixture did not come back after the lab killed it: {exc}"
        raise HarnessError(process.down_reason) from exc
    process.down_reason = None


class _CrashExperiment(Experiment):
    invariants: ClassVar[tuple[str, ...]] = CRASH_INVARIANTS
    default: ClassVar[bool] = False  # not among the six a plain `acklab run` runs
    fault_name: ClassVar[str]

    def applicable(self, target: Target) -> str | None:
        why = target.capabilities().lacks_process()
        if why is None:
            return None
        return f"crash experiments kill the handler's process, so they need a target the lab runs as a process: {why}"

    def needs(self, target: Target, settings: RunSettings) -> Needs:
        return Needs(socket=True, process=True)

    def planned(
        self, target: Target, profile: ProviderProfile, settings: RunSettings
    ) -> tuple[PlannedDelivery, ...]:
        return retry_plan(profile, settings, "original", self.fault_name)


class CrashAfterCommitExperiment(_CrashExperiment):
    name = "crash-after-commit"
    description = (
        "The handler's process is killed (SIGKILL) after its transaction committed and before the "
        "response is written; the lab restarts it, the sender retries, and exactly one effect remains."
    )
    fault_name = CrashAfterCommit.name

    def skipped_for(self, target: Target) -> str | None:
        return ANSWERS_FIRST if target.expect.effects_within_s > 0 else None

    async def attempt(self, trial: TrialContext, events: list[WebhookEvent]) -> Proof:
        (event,) = events
        if (
            trial.lab.endpoint.hooked is None
        ):  # a service the lab can only kill: strike at the sight of the commit
            return await self._strike_service(trial, event)
        process = _hooked(trial)
        await _restart(process, crash_after_commit=True)
        await trial.observe(event, "before")
        started = time.monotonic()
        first = await trial.send(event, kind="original", attempt=1, fault=CrashAfterCommit())
        code = await asyncio.to_thread(process.wait_exit, CRASH_WAIT_S)
        trial.parameters.update(crash_exit_code=code, restarts=process.starts)
        after = await trial.observe(event, "after-crash")
        struck = code is not None and after.effects >= 1 and first.sender_status is None
        trial.parameters["crash_landed"] = struck
        if code is None:
            await asyncio.to_thread(process.kill)
        await _restart(process)
        await trial.retry_until_acked(event, started=started, first=first)
        await trial.settle([event])
        if code is None:
            return missed(f"the fixture did not crash within {CRASH_WAIT_S} s of the delivery")
        if not struck:
            return missed(
                f"the fixture exited ({code}) but the commit was not seen ({after.effects} effects) or the "
                f"sender still got {first.sender_status}"
            )
        return landed(
            f"the fixture killed itself (exit {code}) after its commit ({after.effects} effect) and before "
            "answering; the sender got no answer",
            exit_code=code,
        )

    async def _strike_service(self, trial: TrialContext, event: WebhookEvent) -> Proof:
        endpoint = trial.lab.endpoint
        service = endpoint.process
        if service is None:
            raise HarnessError(
                "crash-after-commit ran without the process it asked for (the lab served it another way)"
            )
        starts = service.starts
        await trial.observe(event, "before")
        started = time.monotonic()
        fault = WithheldAnswer()
        sending = asyncio.create_task(trial.send(event, kind="original", attempt=1, fault=fault))
        try:
            strike = await _watch_and_kill(
                endpoint, service, event, fault=fault, sending=sending, deadline=started + CRASH_WAIT_S
            )
        finally:
            fault.decided.set()
            first = await sending
        if strike.killed and strike.seen == 0 and strike.told >= 1 and not endpoint.probe_served_by_process():
            # The send was seen first; whether the commit had come too is read now the service is gone.
            strike = dataclasses.replace(
                strike, seen=await endpoint.probe.count(event.event_id, event.object_id)
            )
        outcome = strike.outcome(first, answered=fault.got_answer)
        trial.parameters.setdefault("strike_outcomes", []).append(outcome)
        trial.parameters.update(crash_exit_code=strike.code, crash_landed=outcome in STRIKES_LANDED)
        await _restart_service(trial, endpoint, service, event, killed=strike.killed)
        trial.parameters["restarts"] = trial.parameters.get("restarts", 0) + service.starts - starts
        await trial.retry_until_acked(event, started=started, first=first)
        await trial.settle([event])
        return strike.proof(outcome, first)


@dataclasses.dataclass(frozen=True)
class _Strike:
    """What the watch over one delivery to a service saw and did: the kill, its exit code, the
    effects (`seen`) and the sinks' emails and calls (`told`) for the event at that moment."""

    killed: bool = False
    code: int | None = None
    seen: int = 0
    told: int = 0

    def outcome(self, first: DeliveryRecord, *, answered: bool) -> str:
        if self.killed and answered:
            return KILLED_AFTER_ANSWER
        if self.killed and first.sender_status is None:
            return LANDED if self.seen >= 1 else KILLED_AFTER_SEND
        return MISSED if first.sender_status is not None else NO_COMMIT

    def proof(self, outcome: str, first: DeliveryRecord) -> Proof:
        code = self.code
        if outcome == KILLED_AFTER_ANSWER:
            return landed(
                f"the service answered {first.status} to seq {first.seq} before the lab saw its commit; the lab "
                f"withheld that answer from the sender, killed the service's process group (exit {code}) and "
                "restarted it when ready: the sender's retry reached a fresh process (killed-after-answer)",
                exit_code=code,
                outcome=KILLED_AFTER_ANSWER,
            )
        if outcome == LANDED:
            return landed(
                f"the commit was seen ({self.seen} effect) while seq {first.seq} was in flight; the service's "
                f"process group was killed (exit {code}) before it answered, and restarted when ready",
                exit_code=code,
            )
        if outcome == KILLED_AFTER_SEND:
            return landed(
                f"the event's first email/call ({self.told}) reached the lab's sinks while seq {first.seq} was in "
                f"flight and before any commit showed; the service's process group was killed (exit {code}) "
                "between its send and its commit, and restarted when ready (killed-after-send-before-commit)",
                exit_code=code,
                outcome=KILLED_AFTER_SEND,
            )
        if outcome == MISSED:
            return missed(
                f"the service answered {first.sender_status} before the lab saw its commit (the effects "
                "probe lags the response, or the service answers before committing)"
            )
        return missed(f"no commit showed and no answer came for seq {first.seq} ({first.error})")


async def _watch_and_kill(
    endpoint: Endpoint,
    service: ProcessControl,
    event: WebhookEvent,
    *,
    fault: WithheldAnswer,
    sending: asyncio.Task[DeliveryRecord],
    deadline: float,
) -> _Strike:
    """A tight loop on the probe while the request is in flight: kill at the first sight of the
    commit (or of the event's first email or call), so the response, written after it, is cut off.
    An answer that beats the probe is held back from the sender, and the service killed all the same."""
    seen = told = 0
    while not sending.done() and time.monotonic() < deadline:
        if not fault.answered.is_set():
            seen = await endpoint.probe.count(event.event_id, event.object_id)
            told = _told(endpoint, event.event_id)
        if fault.answered.is_set() and not fault.got_answer:
            break  # the exchange failed without an answer: nothing to withhold or strike
        if seen >= 1 or told >= 1 or fault.answered.is_set():
            # Whatever answer comes before the kill is done never reaches the sender.
            fault.withhold = True
            try:
                code = await asyncio.to_thread(service.kill)
            except HarnessError as exc:
                service.down_reason = str(exc)
                raise
            return _Strike(killed=True, code=code, seen=seen, told=told)
        await asyncio.sleep(0)
    return _Strike(seen=seen, told=told)


async def _restart_service(
    trial: TrialContext, endpoint: Endpoint, service: ProcessControl, event: WebhookEvent, *, killed: bool
) -> None:
    """Observe the event after the strike and bring the service back (a probe the killed service
    serves itself is read only once it is back)."""
    after_restart = endpoint.probe_served_by_process()
    if not after_restart:
        await trial.observe(event, "after-crash")
    if killed or not service.running():
        try:
            await asyncio.to_thread(service.start)
        except HarnessError as exc:
            raise HarnessError(f"the service did not come back after the lab killed it: {exc}") from exc
    if after_restart:
        await trial.observe(event, "after-crash")


def _told(endpoint: Endpoint, event_id: str) -> int:
    """Emails and effect calls the sinks have received for the event (0 without sinks)."""
    if endpoint.sinks is None:
        return 0
    return endpoint.sinks.tally(event_id).received


class CrashMidTransactionExperiment(_CrashExperiment):
    name = "crash-mid-transaction"
    description = (
        "The handler's process is killed (SIGKILL) while its transaction is open; nothing may be left "
        "half-written, the lab restarts it, the sender retries, and exactly one effect remains."
    )
    fault_name = CrashMidTransaction.name

    def applicable(self, target: Target) -> str | None:
        why = target.capabilities().lacks_process(hooked=True)
        if why is None:
            return None
        return (
            "crash-mid-transaction aims its kill inside the handler's open transaction, which the lab can see "
            f"only in a process whose handler it hooks (the built-in fixture), and {why}; use "
            "crash-after-commit on a target spec with command:"
        )

    async def attempt(self, trial: TrialContext, events: list[WebhookEvent]) -> Proof:
        (event,) = events
        process = _hooked(trial)
        database_url = process.database_url
        await _restart(process, processing_delay_ms=MID_TRANSACTION_DELAY_MS)
        await trial.observe(event, "before")
        started = time.monotonic()
        sending = asyncio.create_task(
            trial.send(event, kind="original", attempt=1, fault=CrashMidTransaction())
        )
        inside = await wait_in_transaction(database_url, CRASH_WAIT_S)
        code = await asyncio.to_thread(process.kill)
        first = await sending
        trial.parameters.update(
            crash_exit_code=code, transaction_seen_open=inside, processing_delay_ms=MID_TRANSACTION_DELAY_MS
        )
        after = await trial.observe(event, "after-crash")
        trial.parameters["left_half_written"] = after.effects != 0
        await _restart(process)
        await trial.retry_until_acked(event, started=started, first=first)
        await trial.settle([event])
        if not inside:
            return missed(f"the handler's transaction was not seen open within {CRASH_WAIT_S} s")
        return landed(
            f"the handler's transaction was seen open; the process was killed (exit {code}) inside it",
            exit_code=code,
        )
