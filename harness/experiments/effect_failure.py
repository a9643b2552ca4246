"""``effect-failure``: the effect the handler needs fails, and the handler answers 2xx anyway.

The SMTP server refuses the receipt, the downstream API or the provider's API answers 503 —
and the handler, catching the error, acknowledges the event: the provider never sends it again,
and the customer never gets the email nor the refund (octopusreview PR #577). A handler that
answers 5xx when its effect failed gets the provider's retry, by which time the sink works.

Each try delivers one event with every sink of the target refusing that event's effects
(`harness.sinks.Sinks.fail`: SMTP ``554``, outbound and provider's API ``503`` on calls that
would take effect) until its first attempt is answered; the provider's retries find them
working. Judged: ``acked-exactly-once`` per failed source — an event the handler acknowledged
has its email (its call) once settled. The fault landed when a sink refused the event at least
once.
"""

from __future__ import annotations

from typing import ClassVar

from acklab.harness.core.plan import PlannedDelivery, RunSettings
from acklab.harness.core.proofs import Proof, landed, missed
from acklab.harness.core.trial import TrialContext
from acklab.harness.experiments.base import Experiment, deliver_struck, retry_plan
from acklab.harness.targets import Target
from acklab.harness.wire.providers import ProviderProfile
from acklab.harness.wire.templates import WebhookEvent


class EffectFailureExperiment(Experiment):
    name = "effect-failure"
    description = (
        "One event whose effects every sink refuses during its first attempt (the SMTP server answers 554, the "
        "outbound API and the provider's API 503); an event the handler acknowledged must have its email and "
        "its call once settled."
    )
    invariants: ClassVar[tuple[str, ...]] = (
        "acked-exactly-once",
        "at-most-once-effect",
        "eventually-acknowledged",
    )
    fault_name = "effect-failure"
    default = False
    proves = "an event acknowledged after its effect failed still gets that effect (or is not acknowledged)"

    def applicable(self, target: Target) -> str | None:
        if target.sink_sources():
            return None
        return (
            "effect-failure makes the consumer's effects outside its database fail, and the target has no sink: add "
            "effects.smtp, effects.outbound or effects.provider_api"
        )

    def planned(
        self, target: Target, profile: ProviderProfile, settings: RunSettings
    ) -> tuple[PlannedDelivery, ...]:
        return retry_plan(profile, settings, "original", self.fault_name)

    async def attempt(self, trial: TrialContext, events: list[WebhookEvent]) -> Proof:
        (event,) = events
        sinks = trial.lab.endpoint.sinks
        if sinks is None:
            raise TypeError("effect-failure on a target without sinks")
        await trial.observe(event, "before")
        trial.emit(event)
        records = await deliver_struck(
            trial,
            event,
            strike=lambda: sinks.fail(event.event_id),
            lift=lambda: sinks.recover(event.event_id),
        )
        refused = sinks.refused(event.event_id)
        failed = sorted({"emails" if r.kind == "email" else "calls" for r in refused})
        trial.parameters.setdefault("failed_sources", {})[event.event_id] = failed
        await trial.settle([event])
        if not refused:
            return missed(
                f"the handler sent no email and made no effect call for the event during its first attempt "
                f"(answered {records[0].status}): no sink had anything to refuse"
            )
        shown = "; ".join(
            f"{'email' if r.kind == 'email' else f'{r.method} {r.path}'} {r.served}" for r in refused[:5]
        )
        return landed(
            f"the sinks refused {len(refused)} of the event's effects during its first attempt ({shown}); its "
            f"first attempt was answered {records[0].status}",
            refused=len(refused),
            sources=", ".join(failed),
        )
