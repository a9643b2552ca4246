"""The sender loses the acknowledgement of a delivery the handler processed, and retries.

* ``lost-ack``: the handler answers 2xx and commits; the lab confirms the commit through the
  effects probe; the sender gets a synthetic 504. A 4xx/5xx is handed on as it is.
* ``lost-ack-reset``: the connection is reset right after the request was sent.
* ``timeout-overlap``: the first attempt's timeout is below the handler's measured latency,
  so the sender retries into a handler that is still working. The latency is measured once
  per experiment on several deliveries (their fastest), and each try checks that the
  timeout really fired while the handler worked; a handler that answered first makes the
  next try's timeout shorter.
"""

from __future__ import annotations

from typing import Any, ClassVar

from acklab.harness.core.plan import PlannedDelivery, RunSettings
from acklab.harness.core.proofs import Proof, landed, missed
from acklab.harness.core.trial import TrialContext
from acklab.harness.experiments.base import Experiment, retry_plan
from acklab.harness.targets import Needs, Target
from acklab.harness.wire.faults import Fault, LostAck, ResetAfterSend, SenderTimeout
from acklab.harness.wire.providers import ProviderProfile
from acklab.harness.wire.records import DeliveryRecord
from acklab.harness.wire.templates import WebhookEvent

RETRY_INVARIANTS = ("at-most-once-effect", "acked-exactly-once", "eventually-acknowledged")
MIN_TIMEOUT_S = 0.0005
CALIBRATION_DELIVERIES = 3


def no_answer(first: DeliveryRecord) -> Proof:
    return missed(f"the original (seq {first.seq}) got no answer from the handler ({first.error})")


def ack_lost(trial: TrialContext, first: DeliveryRecord) -> Proof:
    """Whether the acknowledgement of `first` (sent with `LostAck`) was lost after its commit was seen."""
    if first.status is None:
        return no_answer(first)
    if not first.acknowledged:
        return missed(
            f"the handler answered {first.status} to the original (seq {first.seq}); only an "
            f"acknowledgement can be lost, so the sender got the {first.status} as it was"
        )
    confirmation = trial.confirmation(first.seq)
    if confirmation is None or not confirmation.confirmed:
        return missed(
            f"the handler answered {first.status} but its commit did not show in the effects within "
            f"{trial.confirm_window_s:g} s; the sender got the {first.status} (if the consumer works "
            "after answering, set expect.effects_within_s)"
        )
    return landed(
        f"the handler answered {first.status} to seq {first.seq}; its commit was seen "
        f"({confirmation.effects} effect) before the sender got the synthetic "
        f"{confirmation.synthetic_status}",
        confirmed_effects=confirmation.effects,
        synthetic_status=confirmation.synthetic_status,
    )


class _Retrying(Experiment):
    invariants: ClassVar[tuple[str, ...]] = RETRY_INVARIANTS

    def planned(
        self, target: Target, profile: ProviderProfile, settings: RunSettings
    ) -> tuple[PlannedDelivery, ...]:
        return retry_plan(profile, settings, "original", self.fault_name)

    async def first_fault(self, trial: TrialContext) -> Fault:
        raise NotImplementedError

    def proof(self, trial: TrialContext, first: DeliveryRecord) -> Proof:
        raise NotImplementedError

    async def attempt(self, trial: TrialContext, events: list[WebhookEvent]) -> Proof:
        (event,) = events
        await trial.observe(event, "before")
        sent = await trial.deliver(event, first_fault=await self.first_fault(trial))
        await trial.settle([event])
        return self.proof(trial, sent[0])


class LostAckExperiment(_Retrying):
    name = "lost-ack"
    description = (
        "The handler processes a delivery and answers 2xx; the acknowledgement is lost (the lab confirms "
        "the commit, then hands the sender a synthetic 504) and the sender retries the identical body."
    )
    fault_name = "lost-ack"

    async def first_fault(self, trial: TrialContext) -> Fault:
        return LostAck()

    def proof(self, trial: TrialContext, first: DeliveryRecord) -> Proof:
        return ack_lost(trial, first)


class LostAckResetExperiment(_Retrying):
    name = "lost-ack-reset"
    description = (
        "The connection is reset right after the request was sent: the handler gets it all, the sender "
        "sees a connection error and retries, possibly while the first delivery is still being processed."
    )
    fault_name = "reset"

    def needs(self, target: Target, settings: RunSettings) -> Needs:
        return Needs(socket=True)

    async def first_fault(self, trial: TrialContext) -> Fault:
        return ResetAfterSend()

    def proof(self, trial: TrialContext, first: DeliveryRecord) -> Proof:
        if first.written_mono is None or first.sender_outcome != "cut-by-lab":
            return missed(
                f"the request (seq {first.seq}) was not reset after it was sent "
                f"(sender: {first.sender_error or first.sender_status})"
            )
        answered = (
            f"the handler still answered {first.status}" if first.status is not None else "no answer came"
        )
        return landed(
            f"every byte of seq {first.seq} was written, then the sender's connection was reset; {answered}",
            handler_status=first.status,
        )


class TimeoutOverlapExperiment(_Retrying):
    name = "timeout-overlap"
    description = (
        "The sender's first timeout is set below the handler's measured latency: the sender gives up "
        "while the handler still works and retries into it; later attempts use the profile's timeout."
    )
    fault_name = "timeout"
    calibration_events = CALIBRATION_DELIVERIES

    def needs(self, target: Target, settings: RunSettings) -> Needs:
        delay = settings.processing_delay_ms if target.can_delay else 0
        return Needs(socket=True, processing_delay_ms=delay)

    def planned(
        self, target: Target, profile: ProviderProfile, settings: RunSettings
    ) -> tuple[PlannedDelivery, ...]:
        calibration = tuple(
            PlannedDelivery(
                event=self.events(target) + k,
                kind="probe",
                attempt=1,
                fault="none",
                at_ms=0,
                when="once per experiment, before its first trial",
            )
            for k in range(CALIBRATION_DELIVERIES)
        )
        return (*calibration, *retry_plan(profile, settings, "original", self.fault_name))

    async def prepare(self, trial: TrialContext) -> None:
        """Measure the handler once per experiment, on events of its own (kind "probe")."""
        memo = trial.lab.memo.setdefault(self.name, {})
        if "latencies_ms" not in memo:
            latencies: list[float] = []
            for k in range(CALIBRATION_DELIVERIES):
                event = self.calibration_event(trial, k)
                request, record = trial.prepare(
                    event, kind="probe", attempt=1, fault=SenderTimeout(trial.lab.horizon_s)
                )
                await trial.transmit(request, record)
                await trial.lab.transport.quiesce(trial.lab.horizon_s)
                if record.status is not None:
                    latencies.append(record.latency_ms)
            memo["latencies_ms"] = latencies
            memo["calibrated_in"] = trial.plan.trial_id
        trial.parameters.update(
            calibration_latencies_ms=memo["latencies_ms"],
            calibrated_in=memo["calibrated_in"],
            later_timeout_s=trial.lab.target.timeout_s,
        )

    def _timeout_s(self, trial: TrialContext) -> float:
        """overlap_ratio x the fastest answer seen (calibration, and this trial's earlier tries)."""
        seen: list[float] = list(trial.lab.memo[self.name]["latencies_ms"])
        seen += [t.facts["handler_ms"] for t in trial.tries if t.facts and "handler_ms" in t.facts]
        if not seen:
            return trial.lab.target.timeout_s
        return max(MIN_TIMEOUT_S, min(seen) / 1000 * trial.lab.settings.overlap_ratio)

    async def first_fault(self, trial: TrialContext) -> Fault:
        timeout_s = self._timeout_s(trial)
        trial.parameters.setdefault("first_timeouts_s", []).append(round(timeout_s, 6))
        return SenderTimeout(timeout_s)

    def proof(self, trial: TrialContext, first: DeliveryRecord) -> Proof:
        timeout_s = trial.parameters["first_timeouts_s"][-1]
        facts: dict[str, Any] = {"timeout_ms": round(timeout_s * 1000, 3)}
        if first.status is None:
            return no_answer(first)
        facts["handler_ms"] = first.latency_ms
        timed_out = first.sender_outcome == "timed-out"
        if timed_out and first.latency_ms > timeout_s * 1000:
            return landed(
                f"the sender's timeout fired after {timeout_s * 1000:.1f} ms while the handler was still "
                f"working: it answered {first.status} after {first.latency_ms:.1f} ms",
                **facts,
            )
        return missed(
            f"the handler answered {first.status} after {first.latency_ms:.1f} ms, within the sender's "
            f"{timeout_s * 1000:.1f} ms timeout: no overlap; the next try times out sooner",
            **facts,
        )
