"""The sender loses the acknowledgement of a delivery the handler processed, and retries.

* ``lost-ack``: the handler answers and commits; the lab confirms the commit through the
  effects probe; the sender gets a synthetic 504.
* ``lost-ack-reset``: the connection is reset right after the request was sent.
* ``timeout-overlap``: the first attempt's timeout is below the handler's measured latency,
  so the sender retries into a handler that is still working.
"""

from __future__ import annotations

from typing import ClassVar

from acklab.harness.experiments.base import Experiment, retry_plan
from acklab.harness.faults import Fault, LostAck, ResetAfterSend, SenderTimeout
from acklab.harness.plan import PlannedDelivery, Settings
from acklab.harness.providers import ProviderProfile
from acklab.harness.targets import Needs, Target
from acklab.harness.trial import TrialContext

RETRY_INVARIANTS = ("at-most-once-effect", "acked-exactly-once")
MIN_TIMEOUT_S = 0.001


class _Retrying(Experiment):
    invariants: ClassVar[tuple[str, ...]] = RETRY_INVARIANTS
    fault_name: ClassVar[str]

    def planned(
        self, target: Target, profile: ProviderProfile, settings: Settings
    ) -> tuple[PlannedDelivery, ...]:
        return retry_plan(profile, settings, "original", self.fault_name)

    async def first_fault(self, trial: TrialContext) -> Fault:
        raise NotImplementedError

    async def run(self, trial: TrialContext) -> None:
        event = trial.event(0)
        await trial.observe(event, "before")
        await trial.deliver(event, first_fault=await self.first_fault(trial))
        await trial.settle([event])


class LostAckExperiment(_Retrying):
    name = "lost-ack"
    description = (
        "The handler processes a delivery and answers; the acknowledgement is lost (the lab confirms the "
        "commit, then hands the sender a synthetic 504) and the sender retries the identical body."
    )
    fault_name = "lost-ack"

    async def first_fault(self, trial: TrialContext) -> Fault:
        return LostAck()


class LostAckResetExperiment(_Retrying):
    name = "lost-ack-reset"
    description = (
        "The connection is reset right after the request was sent: the handler gets it all, the sender "
        "sees a connection error and retries, possibly while the first delivery is still being processed."
    )
    fault_name = "reset"

    def needs(self, target: Target, settings: Settings) -> Needs:
        return Needs(socket=True)

    async def first_fault(self, trial: TrialContext) -> Fault:
        return ResetAfterSend()


class TimeoutOverlapExperiment(_Retrying):
    name = "timeout-overlap"
    description = (
        "The sender's first timeout is set below the handler's measured latency: the sender gives up "
        "while the handler still works and retries into it; later attempts use the profile's timeout."
    )
    fault_name = "timeout"
    calibration_events = 1

    def needs(self, target: Target, settings: Settings) -> Needs:
        delay = settings.processing_delay_ms if target.can_delay else 0
        return Needs(socket=True, processing_delay_ms=delay)

    def planned(
        self, target: Target, profile: ProviderProfile, settings: Settings
    ) -> tuple[PlannedDelivery, ...]:
        calibration = PlannedDelivery(
            event=1, kind="probe", attempt=1, fault="none", at_ms=0, when="before the trial"
        )
        return (calibration, *retry_plan(profile, settings, "original", self.fault_name))

    async def first_fault(self, trial: TrialContext) -> Fault:
        # Measure the handler on an event of its own (kind "probe"), waiting as long as it takes.
        calibration = trial.event(self.events_per_trial)
        request, record = trial.prepare(
            calibration, kind="probe", attempt=1, fault=SenderTimeout(trial.lab.horizon_s)
        )
        await trial.transmit(request, record)
        await trial.lab.transport.quiesce(trial.lab.horizon_s)
        latency_s = record.latency_ms / 1000
        timeout_s = max(MIN_TIMEOUT_S, latency_s * trial.lab.settings.overlap_ratio)
        trial.parameters.update(
            measured_latency_ms=record.latency_ms,
            calibration_status=record.status,
            first_timeout_s=round(timeout_s, 6),
            later_timeout_s=trial.lab.target.timeout_s,
        )
        return SenderTimeout(timeout_s)
