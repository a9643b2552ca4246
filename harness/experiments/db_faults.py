"""Faults on the link between the fixture and PostgreSQL: ``db-latency``, ``db-reset``, ``db-blackhole``.

The lab serves the fixture with its database URL pointed at a `harness.netfaults` proxy in
front of the real PostgreSQL, and strikes that link during a delivery:

* ``db-reset``: the connection is reset (RST). Three strikes, in turn per trial:
  ``ack-lost`` (downstream, mid-transaction: the COMMIT happens, its answer never comes),
  ``commit-lost`` (upstream, mid-transaction: the COMMIT never arrives) and
  ``before-the-handler`` (the pool's connections are reset as the handler starts).
* ``db-blackhole``: the same three strikes with Toxiproxy's ``timeout`` toxic: nothing
  passes, and the proxy closes the link after a second of silence.
* ``db-latency``: every chunk on the link is delayed; the sender's first timeout is set
  below the handler's measured latency, so it retries into a handler still working.

A handler that could not commit must answer 5xx, never 2xx (``no-2xx-without-commit``,
judged on the ``after-fault`` observation); the sender retries after the fault is lifted
and the link verified; the final state holds exactly one effect per event. The same
fixture instance serves every trial: it must reconnect by itself.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import ClassVar

from acklab.harness.core.plan import PlannedDelivery, RunSettings
from acklab.harness.core.proofs import Proof, landed, missed
from acklab.harness.core.trial import TrialContext
from acklab.harness.errors import HarnessError
from acklab.harness.experiments.base import Experiment, retry_plan
from acklab.harness.experiments.struck import DbLinkStruck
from acklab.harness.netfaults import Fault, Latency, ProxyThread, ResetPeer, Timeout
from acklab.harness.targets import Needs, Target
from acklab.harness.targets.inflight import wait_in_transaction
from acklab.harness.wire.faults import SenderTimeout
from acklab.harness.wire.providers import ProviderProfile
from acklab.harness.wire.templates import WebhookEvent

DB_INVARIANTS = (
    "at-most-once-effect",
    "acked-exactly-once",
    "eventually-acknowledged",
    "no-2xx-without-commit",
)
MID_TRANSACTION_DELAY_MS = 300  # the handler's work before COMMIT: the window a strike aims at
BLACKHOLE_CLOSE_MS = 1000
OPEN_TRANSACTION_WAIT_S = 10.0
LATENCY = Latency(ms=40, jitter=10, stream="both")
MIN_TIMEOUT_S = 0.001
FIXTURE_EFFECTS_SQL = "SELECT count(*) FROM fulfillments WHERE event_id = :event_id"


@dataclasses.dataclass(frozen=True)
class Strike:
    """One way a trial breaks the link: the fault, and whether it waits for an open transaction."""

    label: str
    fault: Fault
    mid_transaction: bool
    commits: bool = False  # whether the handler's COMMIT reaches the database when it lands as aimed


def _link(trial: TrialContext) -> tuple[ProxyThread, str]:
    """The proxy on the trial's database link, and the real database's URL."""
    link = trial.lab.endpoint.db_link
    if link is None:
        raise HarnessError(
            "a database-link experiment ran without the link it asked for (the lab served it another way)"
        )
    return link.proxy, link.database_url


@asynccontextmanager
async def injected(trial: TrialContext, fault: Fault) -> AsyncIterator[ProxyThread]:
    """``fault`` on the link for the body; lifted and the link verified afterwards, even on error."""
    proxy, _ = _link(trial)
    mark = len(proxy.events)
    await asyncio.to_thread(proxy.apply, fault)
    try:
        yield proxy
    finally:
        try:
            await asyncio.to_thread(proxy.lift)
            await asyncio.to_thread(proxy.verify_healthy)
        finally:
            trial.parameters["db_fault"] = fault.record()
            trial.parameters["proxy_events"] = [e.record() for e in proxy.events[mark:]]


class _DbLinkExperiment(Experiment):
    invariants: ClassVar[tuple[str, ...]] = DB_INVARIANTS
    default: ClassVar[bool] = False  # not among the six a plain `acklab run` runs

    def applicable(self, target: Target) -> str | None:
        why = target.capabilities().lacks_db_link()
        return None if why is None else f"faults on the database link: {why}"


class _StrikeExperiment(_DbLinkExperiment):
    strikes: ClassVar[tuple[Strike, ...]]
    fault_name = DbLinkStruck.name

    def needs(self, target: Target, settings: RunSettings) -> Needs:
        return Needs(socket=True, processing_delay_ms=MID_TRANSACTION_DELAY_MS, db_link=True)

    def planned(
        self, target: Target, profile: ProviderProfile, settings: RunSettings
    ) -> tuple[PlannedDelivery, ...]:
        return retry_plan(profile, settings, "original", DbLinkStruck.name)

    async def attempt(self, trial: TrialContext, events: list[WebhookEvent]) -> Proof:
        (event,) = events
        strike = self.strikes[trial.plan.index % len(self.strikes)]
        _, database_url = _link(trial)
        await trial.observe(event, "before")
        trial.parameters.update(strike=strike.label, processing_delay_ms=MID_TRANSACTION_DELAY_MS)
        started = time.monotonic()
        aimed = True
        if strike.mid_transaction:
            sending = asyncio.create_task(trial.send(event, kind="original", attempt=1, fault=DbLinkStruck()))
            quiet_s = MID_TRANSACTION_DELAY_MS / 3000
            aimed = await wait_in_transaction(database_url, OPEN_TRANSACTION_WAIT_S, quiet_for_s=quiet_s)
            async with injected(trial, strike.fault):
                first = await sending
                await trial.lab.transport.quiesce(trial.lab.horizon_s)
        else:
            async with injected(trial, strike.fault):
                first = await trial.send(event, kind="original", attempt=1, fault=DbLinkStruck())
                await trial.lab.transport.quiesce(trial.lab.horizon_s)
        after = await trial.observe(event, "after-fault")
        # Evidence that the strike hit what it aimed at (the COMMIT's answer, or the COMMIT).
        hit = aimed and (after.effects >= 1) == strike.commits
        trial.parameters["strike_landed"] = hit
        await trial.retry_until_acked(event, started=started, first=first)
        await trial.settle([event])
        if not aimed:
            return missed(
                f"the handler's transaction was not seen open within {OPEN_TRANSACTION_WAIT_S} s; the "
                f"{strike.label} strike could not aim"
            )
        if not hit:
            expected = "committed" if strike.commits else "left nothing"
            return missed(
                f"the {strike.label} strike should have {expected}, but the database held {after.effects} "
                "effect(s) once it was lifted: it did not hit what it aimed at"
            )
        return landed(
            f"the {strike.label} strike broke the link while seq {first.seq} was in the handler; once lifted "
            f"the database held {after.effects} effect(s), as aimed; the handler answered {first.status}",
            strike=strike.label,
        )


class DbResetExperiment(_StrikeExperiment):
    name = "db-reset"
    description = (
        "The fixture's connection to PostgreSQL is reset (RST) mid-transaction — after its COMMIT was sent "
        "(the answer is lost), before it (the COMMIT is lost) — or as the handler starts; the handler must "
        "answer 5xx, the sender retries after the link is healthy, and exactly one effect remains."
    )
    strikes = (
        Strike("ack-lost", ResetPeer(stream="downstream"), True, commits=True),
        Strike("commit-lost", ResetPeer(stream="upstream"), True),
        Strike("before-the-handler", ResetPeer(stream="downstream"), False),
    )


class DbBlackholeExperiment(_StrikeExperiment):
    name = "db-blackhole"
    description = (
        "The fixture's link to PostgreSQL goes silent (nothing passes; the proxy closes it after a second) "
        "mid-transaction after or before the COMMIT, or as the handler starts; the handler must answer "
        "5xx, the sender retries after the link is healthy, and exactly one effect remains."
    )
    strikes = (
        Strike("ack-lost", Timeout(timeout=BLACKHOLE_CLOSE_MS, stream="downstream"), True, commits=True),
        Strike("commit-lost", Timeout(timeout=BLACKHOLE_CLOSE_MS, stream="upstream"), True),
        Strike("before-the-handler", Timeout(timeout=BLACKHOLE_CLOSE_MS), False),
    )


class DbLatencyExperiment(_DbLinkExperiment):
    name = "db-latency"
    description = (
        "Every chunk between the fixture and PostgreSQL is delayed (40 ms ± 10, both ways); the sender's "
        "first timeout is set below the handler's measured latency, so it retries into a handler still "
        "working on the slow link."
    )
    calibration_events = 3  # one per try
    fault_name = SenderTimeout.name

    def needs(self, target: Target, settings: RunSettings) -> Needs:
        return Needs(socket=True, db_link=True)

    def planned(
        self, target: Target, profile: ProviderProfile, settings: RunSettings
    ) -> tuple[PlannedDelivery, ...]:
        calibration = PlannedDelivery(
            event=self.events(target), kind="probe", attempt=1, fault="none", at_ms=0, when="before the try"
        )
        return (calibration, *retry_plan(profile, settings, "original", SenderTimeout.name))

    async def attempt(self, trial: TrialContext, events: list[WebhookEvent]) -> Proof:
        (event,) = events
        await trial.observe(event, "before")
        async with injected(trial, LATENCY):
            calibration = self.calibration_event(trial, len(trial.tries))
            request, record = trial.prepare(
                calibration, kind="probe", attempt=1, fault=SenderTimeout(trial.lab.horizon_s)
            )
            await trial.transmit(request, record)
            await trial.lab.transport.quiesce(trial.lab.horizon_s)
            timeout_s = max(MIN_TIMEOUT_S, record.latency_ms / 1000 * trial.lab.settings.overlap_ratio)
            trial.parameters.update(
                measured_latency_ms=record.latency_ms, first_timeout_s=round(timeout_s, 6)
            )
            started = time.monotonic()
            first = await trial.send(event, kind="original", attempt=1, fault=SenderTimeout(timeout_s))
            await trial.retry_until_acked(event, started=started, first=first)
            await trial.lab.transport.quiesce(trial.lab.horizon_s)
        await trial.observe(event, "after-fault")
        await trial.settle([event])
        timed_out = first.sender_outcome == "timed-out"
        if first.status is not None and timed_out and first.latency_ms > timeout_s * 1000:
            return landed(
                f"the sender's timeout fired after {timeout_s * 1000:.1f} ms while the handler still worked on "
                f"the slow link: it answered {first.status} after {first.latency_ms:.1f} ms",
                timeout_ms=round(timeout_s * 1000, 3),
                handler_ms=first.latency_ms,
            )
        return missed(
            f"the handler answered {first.status} after {first.latency_ms:.1f} ms, within the sender's "
            f"{timeout_s * 1000:.1f} ms timeout: no overlap"
        )
