"""``key-rotation``, ``raw-bytes``, ``clock-skew``: genuine deliveries a verifier must accept.

`replay` sends what must be refused; these send what providers really send and a consumer
must accept — a rejected genuine delivery is a lost event (``eventually-acknowledged``: the
provider sends it the same way on every retry):

* ``key-rotation`` (``signing.rotation: {old_secret: ...}``; the consumer holds ``signing.secret``,
  the new one): during the overlap a delivery carries a signature per active secret, in the
  provider's format (`harness.wire.signatures`), sent in both orders — a verifier that checks only
  the first signature fails one of them; after the overlap a delivery signed only with the old
  secret must be refused (``replay-rejected``, kind ``replay-expired-secret``).
* ``raw-bytes``: bodies whose bytes are unusual and whose JSON is the same (pretty-printed, escaped,
  ``1.10``-style numbers: `harness.wire.raw_bodies`) — a verifier of a re-serialised body rejects them.
* ``clock-skew``: the signed timestamp half the provider's tolerance behind and ahead of the
  consumer's clock (a provider or consumer clock off by minutes): within the tolerance the
  consumer's reference library allows, so it must be accepted.

Each try first delivers a control — fresh, signed with ``signing.secret`` as usual — which must be
acknowledged: a handler that rejects everything proves nothing. Only then are the variants
sent, each on an event of its own. The fault landed when the control was acknowledged and every
variant reached the handler and was answered.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any, ClassVar

from acklab.harness.core.plan import PlannedDelivery, RunSettings
from acklab.harness.core.proofs import Proof, landed, missed
from acklab.harness.core.trial import TrialContext
from acklab.harness.experiments.base import Experiment
from acklab.harness.experiments.replay import CONTROL
from acklab.harness.targets import Target
from acklab.harness.wire.providers import ProviderProfile, profile
from acklab.harness.wire.raw_bodies import VARIANTS as RAW_VARIANTS
from acklab.harness.wire.raw_bodies import raw_body
from acklab.harness.wire.records import DeliveryRecord
from acklab.harness.wire.signing import rotation_format, signs_body, signs_timestamp
from acklab.harness.wire.templates import WebhookEvent

GENUINE_INVARIANTS = ("eventually-acknowledged", "acked-exactly-once", "at-most-once-effect")
EXPIRED = "replay-expired-secret"


class GenuineVariants(Experiment):
    """A control, then one event per variant: each sent as the provider really sends it."""

    invariants: ClassVar[tuple[str, ...]] = GENUINE_INVARIANTS
    default = False

    def variants(self, target: Target) -> tuple[str, ...]:
        raise NotImplementedError

    def per_try(self, target: Target) -> int:
        return 1 + len(self.variants(target))

    def planned(
        self, target: Target, profile: ProviderProfile, settings: RunSettings
    ) -> tuple[PlannedDelivery, ...]:
        return (
            CONTROL,
            *(
                PlannedDelivery(
                    event=k,
                    kind=EXPIRED if v == "expired" else "original",
                    attempt=1,
                    fault=self.fault_name,
                    at_ms=0.0,
                    when=f"{v}, once the control was acknowledged",
                )
                for k, v in enumerate(self.variants(target), start=1)
            ),
        )

    async def send(
        self, trial: TrialContext, event: WebhookEvent, variant: str
    ) -> tuple[list[DeliveryRecord], str | None]:
        """Deliver `event` as `variant`; the words for a genuine one (None: it must be refused)."""
        raise NotImplementedError

    async def attempt(self, trial: TrialContext, events: list[WebhookEvent]) -> Proof:
        target = trial.lab.target
        kinds = self.variants(target)
        for event in events:
            await trial.observe(event, "before")
        control = await trial.deliver(events[0])
        if not any(d.acknowledged for d in control):
            await trial.settle(events[:1])
            statuses = ", ".join(str(d.status) for d in control)
            return missed(
                f"the control delivery (fresh, signed with signing.secret as usual) was never acknowledged "
                f"(handler statuses: {statuses}): check signing.secret; rejections of the variants would prove nothing"
            )
        sent: dict[str, list[DeliveryRecord]] = {}
        genuine: dict[str, str] = {}
        for event, variant in zip(events[1:], kinds, strict=True):
            records, words = await self.send(trial, event, variant)
            sent[variant] = records
            if words is not None:
                genuine[event.event_id] = words
        trial.parameters.setdefault("genuine", {}).update(genuine)
        trial.parameters[f"{self.name.replace('-', '_')}_variants"] = list(kinds)
        await trial.settle(events)
        silent = [(v, r) for v, records in sent.items() for r in records[:1] if r.status is None]
        if silent:
            variant, record = silent[0]
            return missed(
                f"the {variant} delivery (seq {record.seq}) got no answer from the handler ({record.error})"
            )
        answers = ", ".join(f"{v} {records[-1].status}" for v, records in sent.items())
        return landed(
            f"the control was acknowledged and every variant reached the handler and was answered: {answers}",
            **{v.replace("-", "_"): records[-1].status for v, records in sent.items()},
        )


class KeyRotationExperiment(GenuineVariants):
    name = "key-rotation"
    fault_name = "key-rotation"
    invariants: ClassVar[tuple[str, ...]] = (*GENUINE_INVARIANTS, "replay-rejected")
    description = (
        "A key rotation as the provider runs it: deliveries signed with both the old and the new secret (in both "
        "orders, in the provider's header format) must be accepted; after the overlap, one signed only with the "
        "old secret must be refused."
    )
    proves = (
        "every delivery signed during a key rotation's overlap is accepted, whichever signature comes first, "
        "and the retired secret is refused after it"
    )
    VARIANTS: ClassVar[tuple[str, ...]] = ("overlap-old-first", "overlap-new-first", "expired")

    def variants(self, target: Target) -> tuple[str, ...]:
        return self.VARIANTS

    def applicable(self, target: Target) -> str | None:
        if target.scheme == "none":
            return (
                "key-rotation: the scheme signs nothing (signing.scheme: none), so there is no key to rotate"
            )
        return rotation_format(target.scheme, target.secret)

    def skipped_for(self, target: Target) -> str | None:
        if target.old_secret is None:
            return (
                "the target names no rotation: add signing.rotation: {old_secret: env:OLD_SECRET} (the secret being "
                "retired; the consumer holds signing.secret, the new one)"
            )
        return None

    async def send(
        self, trial: TrialContext, event: WebhookEvent, variant: str
    ) -> tuple[list[DeliveryRecord], str | None]:
        target = trial.lab.target
        old, new = target.old_secret or "", target.secret
        if variant == "expired":
            return [await trial.send(event, kind=EXPIRED, secret=old)], None
        order = (old, new) if variant == "overlap-old-first" else (new, old)
        first = "old" if variant == "overlap-old-first" else "new"
        words = f"signed with both the old and the new secret during the rotation's overlap, the {first} one first"
        return await trial.deliver(event, signed_with=order), words


class RawBytesExperiment(GenuineVariants):
    name = "raw-bytes"
    fault_name = "raw-bytes"
    description = (
        "Deliveries whose body bytes are unusual and whose JSON is the same — pretty-printed as Stripe sends them, "
        "with \\u and \\/ escapes, with 1.10-style numbers — each signed over its own bytes; a verifier of a "
        "re-serialised body rejects them."
    )
    proves = "bodies are verified as the bytes the provider signed, however they are written"

    def variants(self, target: Target) -> tuple[str, ...]:
        return RAW_VARIANTS

    def applicable(self, target: Target) -> str | None:
        if not signs_body(target.scheme, target.secret):
            return (
                f"raw-bytes: the {target.scheme} scheme signs no body (or nothing), so no verifier reads the body's "
                "bytes"
            )
        return None

    async def send(
        self, trial: TrialContext, event: WebhookEvent, variant: str
    ) -> tuple[list[DeliveryRecord], str | None]:
        body = raw_body(variant, event.document)
        document: Mapping[str, Any] = json.loads(body)
        written = trial.remember(dataclasses.replace(event, body=body, document=document))
        words = {
            "whitespace": "its body pretty-printed, as Stripe sends it",
            "escapes": "its body with \\u and \\/ escapes",
            "numbers": "its body with 1.10-style numbers",
        }[variant]
        return await trial.deliver(written), f"signed over its raw bytes, {words}"


class ClockSkewExperiment(GenuineVariants):
    name = "clock-skew"
    fault_name = "clock-skew"
    description = (
        "Deliveries whose signed timestamp is half the provider's tolerance behind and ahead of the consumer's "
        "clock (clocks off by minutes): within the tolerance, so they must be accepted."
    )
    proves = "deliveries signed within the provider's timestamp tolerance are accepted on a skewed clock"
    VARIANTS: ClassVar[tuple[str, ...]] = ("behind", "ahead")

    def variants(self, target: Target) -> tuple[str, ...]:
        return self.VARIANTS

    def applicable(self, target: Target) -> str | None:
        if not signs_timestamp(target.scheme, target.secret) or profile(target.scheme).tolerance_s is None:
            return f"clock-skew: the {target.scheme} scheme signs no timestamp, so no clock is compared"
        return None

    @staticmethod
    def skew_s(target: Target) -> int:
        return (profile(target.scheme).tolerance_s or 0) // 2

    async def send(
        self, trial: TrialContext, event: WebhookEvent, variant: str
    ) -> tuple[list[DeliveryRecord], str | None]:
        skew = self.skew_s(trial.lab.target)
        trial.parameters["skew_s"] = skew
        signed = -skew if variant == "behind" else skew
        words = (
            f"its signed timestamp {skew} s {variant} the consumer's clock, within the provider's "
            f"{2 * skew} s tolerance"
        )
        return await trial.deliver(event, skew_s=signed), words
