"""``conflicting-payload``: the same event id with a different body, after the original was processed.

What a correct handler answers depends on the target's ``expect.conflict``: ``reject`` (the
default, and the fixture's policy) wants one of ``expect.conflict_status``; ``ignore``
(dedupe by id, Stripe's documented practice) wants a 2xx. Either way the effects — and the
state, where ``effects.sql.state`` or ``effects.http.state_path`` probes it — must stay
exactly as the first body left them (`harness.core.verdicts`). Each try records the fields
the conflicting body changed (``conflict_fields``, `harness.wire.conflicts.changed_fields`).
"""

from __future__ import annotations

from typing import ClassVar

from acklab.harness.core.plan import PlannedDelivery, RunSettings
from acklab.harness.core.proofs import Proof, landed, missed
from acklab.harness.core.trial import TrialContext
from acklab.harness.experiments.base import Experiment, retry_plan
from acklab.harness.targets import Target
from acklab.harness.wire.conflicts import changed_fields
from acklab.harness.wire.providers import ProviderProfile
from acklab.harness.wire.templates import WebhookEvent, conflicting


class ConflictingPayloadExperiment(Experiment):
    name = "conflicting-payload"
    description = (
        "The original is delivered (and retried until acknowledged); once the handler is quiet, a body "
        "that differs (conflict.set) arrives under the same event id. It must be rejected with one of "
        "expect.conflict_status (expect.conflict: reject) or acknowledged (ignore), and leave the "
        "effects — and the probed state — unchanged."
    )
    invariants: ClassVar[tuple[str, ...]] = (
        "at-most-once-effect",
        "acked-exactly-once",
        "eventually-acknowledged",
        "conflict-rejected",
    )
    fault_name = "conflicting-payload"

    def planned(
        self, target: Target, profile: ProviderProfile, settings: RunSettings
    ) -> tuple[PlannedDelivery, ...]:
        conflict = PlannedDelivery(
            event=0, kind="conflict", attempt=1, fault="none", at_ms=0.0, when="after quiescence"
        )
        return (*retry_plan(profile, settings, "original", "none"), conflict)

    async def attempt(self, trial: TrialContext, events: list[WebhookEvent]) -> Proof:
        (event,) = events
        await trial.observe(event, "before")
        originals = await trial.deliver(event)
        await trial.settle([event], note="before-conflict")
        if not any(d.acknowledged for d in originals):
            statuses = ", ".join(str(d.status) for d in originals)
            await trial.settle([event])
            return missed(
                f"the original was never acknowledged (handler statuses: {statuses}); a conflicting body "
                "needs a processed original, so none was sent"
            )
        twin = conflicting(event, trial.lab.target.conflict_set)
        # What differed, for whoever reads the incident: the evidence keeps only the bodies' hashes.
        fields = changed_fields(event.document, twin.document)
        sent = await trial.send(twin, kind="conflict")
        await trial.settle([event])
        if sent.status is None:
            return missed(
                f"the conflicting body (seq {sent.seq}) got no answer ({sent.error})", conflict_fields=fields
            )
        return landed(
            f"the conflicting body (seq {sent.seq}) reached the handler after the original was "
            f"processed and was answered {sent.status}",
            conflict_status=sent.status,
            conflict_fields=fields,
        )
