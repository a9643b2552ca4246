"""``crash-after-ack``: the service's process group is killed right after it acknowledged an event.

For a consumer that answers first and works afterwards (``expect.effects_within_s > 0``), the
risk is not a retry after a commit — the provider will never redeliver an event it saw
acknowledged — but the work between the 2xx and the effect: an in-memory queue dies with the
process. The lab sends one delivery; as soon as the handler's 2xx reaches it, the lab kills
the service's group (a target spec's ``command:``), restarts it, waits for readiness and then
``expect.effects_within_s``, and judges ``acked-exactly-once``: the acknowledged event must
still get its effect, on the restarted service, within that time. No retry is sent: the
sender got its 2xx.

The try landed when the kill came after the 2xx and before the effect showed (read right
after the kill; with an HTTP probe the killed service serves itself, after the restart: the
kill right after the 2xx is the evidence then). An effect already there at the kill leaves
nothing to lose: the try is repeated on a fresh event.
"""

from __future__ import annotations

import asyncio
import time
from typing import ClassVar

from acklab.harness.core.plan import PlannedDelivery, RunSettings
from acklab.harness.core.proofs import Proof, landed, missed
from acklab.harness.core.trial import TrialContext
from acklab.harness.errors import HarnessError
from acklab.harness.experiments.base import Experiment
from acklab.harness.targets import Needs, Target
from acklab.harness.wire.faults import NoFault
from acklab.harness.wire.providers import ProviderProfile
from acklab.harness.wire.templates import WebhookEvent

NEEDS_ANSWERS_FIRST = (
    "crash-after-ack applies to a consumer that answers before it works (expect.effects_within_s > 0): "
    "a consumer that commits before it answers loses nothing acknowledged when it dies — "
    "crash-after-commit is its strike"
)
NEEDS_SERVICE = "crash-after-ack needs a service the lab starts, kills and restarts"


class CrashAfterAckExperiment(Experiment):
    name = "crash-after-ack"
    description = (
        "An answers-first consumer (expect.effects_within_s > 0) acknowledges a delivery; the lab kills "
        "the service's process group right after that 2xx and restarts it. The provider never redelivers "
        "an acknowledged event: its effect must still appear, after the restart, within effects_within_s."
    )
    invariants: ClassVar[tuple[str, ...]] = ("acked-exactly-once", "at-most-once-effect")
    fault_name = "crash-after-ack"
    default: ClassVar[bool] = False
    proves: ClassVar[str] = (
        "every event the consumer acknowledged gets its effect even when the consumer dies right after "
        "its 2xx (the work it promised survives a restart)"
    )

    def applicable(self, target: Target) -> str | None:
        if self.skipped_for(target) is not None:
            return None  # listed as skipped with that reason (the fixture commits before it answers)
        why = target.capabilities().lacks_process()
        return None if why is None else f"{NEEDS_SERVICE}: {why}"

    def skipped_for(self, target: Target) -> str | None:
        return NEEDS_ANSWERS_FIRST if target.expect.effects_within_s <= 0 else None

    def needs(self, target: Target, settings: RunSettings) -> Needs:
        return Needs(socket=True, process=True)

    def planned(
        self, target: Target, profile: ProviderProfile, settings: RunSettings
    ) -> tuple[PlannedDelivery, ...]:
        return (PlannedDelivery(event=0, kind="original", attempt=1, fault="none", at_ms=0.0, when="always"),)

    async def attempt(self, trial: TrialContext, events: list[WebhookEvent]) -> Proof:
        (event,) = events
        endpoint = trial.lab.endpoint
        service = endpoint.process
        if service is None:
            raise HarnessError(
                "crash-after-ack ran without the process it asked for (the lab served it another way)"
            )
        await trial.observe(event, "before")
        first = await trial.send(event, kind="original", attempt=1, fault=NoFault())
        if not first.acknowledged:
            await trial.settle([event])
            return missed(
                f"the handler answered {first.status if first.status is not None else first.error} to seq "
                f"{first.seq}: only an acknowledged event can lose its promised work"
            )
        try:
            code = await asyncio.to_thread(service.kill)
        except HarnessError as exc:
            service.down_reason = str(exc)
            raise
        killed_ms = (time.monotonic() - (first.answered_mono or time.monotonic())) * 1000
        served_by_it = endpoint.probe_served_by_process()
        at_kill = None if served_by_it else (await trial.observe(event, "after-crash")).effects
        try:
            await asyncio.to_thread(service.start)
        except HarnessError as exc:
            raise HarnessError(f"the service did not come back after the lab killed it: {exc}") from exc
        trial.parameters["restarts"] = trial.parameters.get("restarts", 0) + 1
        # The promise is kept on the restarted service: effects_within_s counts from its readiness.
        await asyncio.sleep(trial.lab.target.expect.effects_within_s)
        await trial.settle([event])
        facts = {"exit_code": code, "killed_ms_after_answer": round(killed_ms, 3)}
        if at_kill:
            return missed(
                f"the effect of seq {first.seq} was already there when the lab killed the service "
                f"({killed_ms:.1f} ms after its {first.status}): nothing acknowledged was left to lose",
                **facts,
            )
        seen = "no effect yet" if at_kill == 0 else "the probe is the service's own: read after the restart"
        return landed(
            f"the handler answered {first.status} to seq {first.seq}; the lab killed the service's process "
            f"group {killed_ms:.1f} ms later (exit {code}; {seen}) and restarted it",
            **facts,
        )
