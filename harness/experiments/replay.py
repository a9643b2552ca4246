"""``replay``: deliveries a verifier must reject — stale timestamp, tampered body, foreign secret, cross-wired.

Each variant carries an event id of its own that the handler has never seen, so a
rejection can only come from signature/timestamp verification, not from dedupe. A
control event (valid, fresh) must be accepted first: a target that rejects everything
proves nothing. The fault landed when the control was acknowledged and every forged
delivery reached the handler and was answered.

Variants that cannot apply are skipped, with the reason listed wherever the verdict is:
``replay-stale`` where the signature covers no timestamp, ``replay-tampered`` where it
covers no body (GitLab's legacy ``X-Gitlab-Token`` is a shared token, not a signature),
``replay-cross-wired`` where the lab serves no Stripe API (``effects.provider_api``). On
``scheme: none`` the whole experiment is skipped.

``replay-cross-wired`` is a forger who knows the provider's API: an unsigned event naming the
control's real, succeeded charge — re-fetching it shows it paid — and another order's payment
intent, unpaid. A consumer that authenticates by re-fetching (pretix never checks
``Stripe-Signature``) and then finds the order by the event's payment intent marks the unpaid
order paid: an effect of a forged delivery.
"""

from __future__ import annotations

import dataclasses
import hashlib
import time
from typing import ClassVar

from acklab.harness.core.plan import PlannedDelivery, RunSettings
from acklab.harness.core.proofs import Proof, landed, missed
from acklab.harness.core.trial import TrialContext
from acklab.harness.experiments.base import Experiment
from acklab.harness.sinks.provider_api.stripe_objects import derived_id
from acklab.harness.sinks.provider_api.stripe_objects import event as stripe_event
from acklab.harness.targets import Target
from acklab.harness.wire import providers
from acklab.harness.wire.providers import ProviderProfile
from acklab.harness.wire.signing import foreign_secret, signs_body, signs_timestamp
from acklab.harness.wire.templates import WebhookEvent, conflicting, encode

STALE_AGE_S = 3600  # far beyond the 300 s every reference verifier allows
TAMPER = {"acklab_tampered": True}
# The control every try of a forged or genuine variant starts with: valid, fresh, acknowledged first.
CONTROL = PlannedDelivery(event=0, kind="original", attempt=1, fault="none", at_ms=0.0, when="always")
VARIANTS = ("replay-stale", "replay-tampered", "replay-foreign-secret", "replay-cross-wired")


def skipped(target: Target) -> dict[str, str]:
    """The variants that do not apply to `target`, with why."""
    why: dict[str, str] = {}
    if not signs_timestamp(target.scheme, target.secret):
        why["replay-stale"] = (
            f"the {target.scheme} scheme's signature covers no timestamp, so a stale delivery is "
            "indistinguishable from a fresh one"
        )
    if not signs_body(target.scheme, target.secret):
        why["replay-tampered"] = (
            f"the {target.scheme} scheme authenticates no body (a shared token such as X-Gitlab-Token, "
            "not a signature), so a tampered body cannot be told from the original"
        )
    if target.capabilities().lacks_provider_api("stripe") is not None:
        why["replay-cross-wired"] = (
            "a cross-wired event names one order's real charge and another order's payment intent in the "
            "provider's API: the target has no effects.provider_api (stripe) serving them"
        )
    return why


def variants(target: Target) -> tuple[str, ...]:
    not_here = skipped(target)
    return tuple(v for v in VARIANTS if v not in not_here)


def cross_wired(trial: TrialContext, paid: WebhookEvent, other: WebhookEvent) -> WebhookEvent | None:
    """An unsigned ``charge.succeeded`` naming `paid`'s real succeeded charge and `other`'s order's payment
    intent — which exists, unpaid (the provider created it; this endpoint is not sent its events). A consumer
    that re-fetches the charge to authenticate the event, then finds the order by the event's payment
    intent, marks the unpaid order paid (found by hand on pretix 2026.8). None: `paid` left no charge."""
    sinks = trial.lab.endpoint.sinks
    api = sinks.provider_api if sinks is not None else None
    if api is None:
        return None
    charges = [v.doc for o in api.store.objects_of(paid.event_id) if (v := api.store.current(o)) is not None]
    charge = next(
        (c for c in charges if c.get("object") == "charge" and c.get("status") == "succeeded"), None
    )
    if charge is None:
        return None
    intent_of_paid = str(charge.get("payment_intent") or "pi_" + paid.order_id)
    intent = (
        intent_of_paid.replace(paid.order_id, other.order_id)
        if paid.order_id in intent_of_paid
        else derived_id("pi_", other.event_id)
    )
    created = int(time.time())
    unpaid = {"id": intent, "object": "payment_intent", "status": "requires_payment_method",
              "amount": charge.get("amount"), "currency": charge.get("currency"),
              "metadata": {"order_id": other.order_id}}  # fmt: skip
    api.emit(f"{other.event_id}-created", stripe_event(f"{other.event_id}-created", "payment_intent.created",
                                                       unpaid, created=created), created=created)  # fmt: skip
    document = stripe_event(
        other.event_id, "charge.succeeded", {**charge, "payment_intent": intent}, created=created
    )
    return dataclasses.replace(other, body=encode(document), document=document, event_type="charge.succeeded")


class ReplayExperiment(Experiment):
    name = "replay"
    description = (
        "A valid control delivery, then deliveries that must be rejected with no effect: a stale signed "
        f"timestamp ({STALE_AGE_S} s old; schemes that sign one), a tampered body under a valid signature "
        "(schemes that sign the body), a signature made with another secret, and (with the provider's API) an "
        "unsigned event naming the control's real charge and another order's payment intent."
    )
    invariants: ClassVar[tuple[str, ...]] = (
        "at-most-once-effect",
        "acked-exactly-once",
        "eventually-acknowledged",
        "replay-rejected",
    )
    fault_name = "replay"

    def per_try(self, target: Target) -> int:
        return 1 + len(variants(target))

    def applicable(self, target: Target) -> str | None:
        if providers.profile(target.scheme).signature_header is None:
            return f"replay: the scheme signs nothing (signing.scheme: {target.scheme}), so no delivery can be forged"
        return None

    def skipped_variants(self, target: Target) -> dict[str, str]:
        return skipped(target)

    def planned(
        self, target: Target, profile: ProviderProfile, settings: RunSettings
    ) -> tuple[PlannedDelivery, ...]:
        return (
            CONTROL,
            *(
                PlannedDelivery(event=k, kind=kind, attempt=1, fault="none", at_ms=0.0, when="always")
                for k, kind in enumerate(variants(target), start=1)
            ),
        )

    async def attempt(self, trial: TrialContext, events: list[WebhookEvent]) -> Proof:
        target = trial.lab.target
        kinds = variants(target)
        for event in events:
            await trial.observe(event, "before")
        control = await trial.deliver(events[0])
        other = foreign_secret(
            target.scheme, hashlib.sha256(events[0].event_id.encode()).digest(), like=target.secret
        )
        forged = []
        for event, kind in zip(events[1:], kinds, strict=True):
            if kind == "replay-stale":
                sent = await trial.send(event, kind=kind, timestamp=int(time.time()) - STALE_AGE_S)
            elif kind == "replay-tampered":
                sent = await trial.send(conflicting(event, TAMPER), kind=kind, signed_body=event.body)
            elif kind == "replay-cross-wired":
                wired = cross_wired(trial, events[0], event)
                if wired is None:
                    return missed(
                        "the control event left no succeeded charge in the provider's API (its data.object names no "
                        "payment intent, charge or paid session): nothing to cross-wire"
                    )
                sent = await trial.send(wired, kind=kind, unsigned=True)
            else:
                sent = await trial.send(event, kind=kind, secret=other)
            forged.append(sent)
        trial.parameters["replay_variants"] = list(kinds)
        trial.parameters["stale_age_s"] = STALE_AGE_S
        if skipped(target):
            trial.parameters["skipped_variants"] = skipped(target)
        await trial.settle(events)
        if not any(d.acknowledged for d in control):
            statuses = ", ".join(str(d.status) for d in control)
            return missed(
                f"the control delivery (valid, fresh) was never acknowledged (handler statuses: {statuses}); "
                "rejections of forged deliveries prove nothing when everything is rejected"
            )
        unanswered = [d for d in forged if d.status is None]
        if unanswered:
            return missed(
                "; ".join(
                    f"the {d.kind} delivery (seq {d.seq}) got no answer ({d.error})" for d in unanswered
                )
            )
        answers = ", ".join(f"{d.kind.removeprefix('replay-')} {d.status}" for d in forged)
        return landed(
            f"the control was acknowledged and every forged delivery reached the handler: {answers}",
            forged={d.kind: d.status for d in forged},
        )
