"""``effect-failure``: the effect the handler needs fails, and the handler answers 2xx anyway.

The SMTP server refuses the receipt, the downstream API or the provider's API answers 503 —
and the handler, catching the error, acknowledges the event: the provider never sends it again,
and the customer never gets the email nor the refund (octopusreview PR #577). A handler that
answers 5xx when its effect failed gets the provider's retry, by which time the sink works.

Each try delivers one event with every sink of the target refusing that event's effects
(`harness.sinks.Sinks.fail`: SMTP ``554``, outbound and provider's API ``503`` on calls that
would take effect) until its first attempt is answered; the provider's retries find them
working. Where a sink of the target can stall (its `SinkKind` says so: the SMTP sink), a second
event follows whose mail server *stalls*: it answers nothing until that event's first attempt
is answered (the handler's SMTP client times out, or the provider's sender does first), then
``451``. Judged: ``acked-exactly-once``
per failed source — an event the handler acknowledged has its email (its call) once settled.
The fault landed when a sink refused (or stalled) each event at least once.
"""

from __future__ import annotations

import functools
from typing import ClassVar

from acklab.harness.core.plan import PlannedDelivery, RunSettings
from acklab.harness.core.proofs import Proof, landed, missed
from acklab.harness.core.trial import TrialContext
from acklab.harness.experiments.base import Experiment, deliver_struck, retry_plan
from acklab.harness.sinks import SINKS
from acklab.harness.sinks.records import FailureMode, SinkRecord
from acklab.harness.targets import Target
from acklab.harness.wire.providers import ProviderProfile
from acklab.harness.wire.templates import WebhookEvent


class EffectFailureExperiment(Experiment):
    name = "effect-failure"
    description = (
        "One event whose effects every sink refuses during its first attempt (the SMTP server answers 554, the "
        "outbound API and the provider's API 503), and with an SMTP sink one more whose mail server stalls "
        "until that attempt is answered; an event the handler acknowledged must have its email and its call "
        "once settled."
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
        if target.capabilities().sinks:
            return None
        return (
            "effect-failure makes the consumer's effects outside its database fail, and the target has no sink: add "
            "effects.smtp, effects.outbound or effects.provider_api"
        )

    def modes(self, target: Target) -> tuple[FailureMode, ...]:
        """How the sinks fail each event of a try: refuse, and stall where a sink the target runs
        can (its `SinkKind` declares it: the mail server)."""
        return (
            ("refuse", "stall")
            if any(SINKS[name].stalls for name in target.capabilities().sinks)
            else ("refuse",)
        )

    def per_try(self, target: Target) -> int:
        return len(self.modes(target))

    def planned(
        self, target: Target, profile: ProviderProfile, settings: RunSettings
    ) -> tuple[PlannedDelivery, ...]:
        return tuple(
            planned
            for n in range(self.per_try(target))
            for planned in retry_plan(profile, settings, "original", self.fault_name, event=n)
        )

    async def attempt(self, trial: TrialContext, events: list[WebhookEvent]) -> Proof:
        sinks = trial.lab.endpoint.sinks
        if sinks is None:
            raise TypeError("effect-failure on a target without sinks")
        for event in events:
            await trial.observe(event, "before")
        answered: dict[str, int | None] = {}
        for event, how in zip(events, self.modes(trial.lab.target), strict=True):
            trial.emit(event)
            sent = await deliver_struck(
                trial,
                event,
                strike=functools.partial(sinks.fail, event.event_id, how),
                lift=functools.partial(sinks.recover, event.event_id),
            )
            answered[how] = sent[0].status
        refused = {event.event_id: sinks.refused(event.event_id) for event in events}
        for event_id, records in refused.items():
            trial.parameters.setdefault("failed_sources", {})[event_id] = sorted(_sources(records))
        await trial.settle(events)
        untouched = [
            (how, event) for event, how in zip(events, self.modes(trial.lab.target), strict=True)
            if not refused[event.event_id]
        ]  # fmt: skip
        if untouched:
            how, event = untouched[0]
            return missed(
                f"the handler sent no email and made no effect call for event {event.event_id} during its first "
                f"attempt (answered {answered[how]}): no sink had anything to {how}"
            )
        shown = "; ".join(
            f"{'email' if r.kind == 'email' else f'{r.method} {r.path}'} {r.served}"
            for records in refused.values()
            for r in records[:3]
        )
        total = sum(len(r) for r in refused.values())
        return landed(
            f"the sinks refused {total} of the events' effects during their first attempts ({shown}); the first "
            f"attempts were answered {', '.join(f'{how}: {status}' for how, status in answered.items())}",
            refused=total,
            sources=", ".join(sorted({s for r in refused.values() for s in _sources(r)})),
        )


def _sources(records: list[SinkRecord]) -> set[str]:
    """The sources (``emails``, ``calls``) of the refused records, by the sink that kept each."""
    return {SINKS[r.sink].source for r in records}
