"""``replay``: deliveries a verifier must reject — stale timestamp, tampered body, foreign secret.

Each variant carries an event id of its own that the handler has never seen, so a
rejection can only come from signature/timestamp verification, not from dedupe. A
control event (valid, fresh) must be accepted first: a target that rejects everything
proves nothing. The fault landed when the control was acknowledged and every forged
delivery reached the handler and was answered.

Variants that cannot apply are skipped, with the reason listed wherever the verdict is:
``replay-stale`` where the signature covers no timestamp, ``replay-tampered`` where it
covers no body (GitLab's legacy ``X-Gitlab-Token`` is a shared token, not a signature).
On ``scheme: none`` the whole experiment is skipped.
"""

from __future__ import annotations

import hashlib
import time
from typing import ClassVar

from acklab.harness.core.plan import PlannedDelivery, RunSettings
from acklab.harness.core.proofs import Proof, landed, missed
from acklab.harness.core.trial import TrialContext
from acklab.harness.experiments.base import Experiment
from acklab.harness.targets import Target
from acklab.harness.wire.providers import ProviderProfile
from acklab.harness.wire.signing import foreign_secret, signs_timestamp
from acklab.harness.wire.templates import WebhookEvent, conflicting

STALE_AGE_S = 3600  # far beyond the 300 s every reference verifier allows
TAMPER = {"acklab_tampered": True}
VARIANTS = ("replay-stale", "replay-tampered", "replay-foreign-secret")


def signs_body(scheme: str, secret: str) -> bool:
    """Whether a delivery of `scheme` carries a signature over its body."""
    if scheme == "gitlab":
        return secret.startswith("whsec_")  # else the legacy X-Gitlab-Token: a shared token
    return scheme != "none"


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
    return why


def variants(target: Target) -> tuple[str, ...]:
    not_here = skipped(target)
    return tuple(v for v in VARIANTS if v not in not_here)


class ReplayExperiment(Experiment):
    name = "replay"
    description = (
        "A valid control delivery, then deliveries that must be rejected with no effect: a stale signed "
        f"timestamp ({STALE_AGE_S} s old; schemes that sign one), a tampered body under a valid signature "
        "(schemes that sign the body), and a signature made with another secret."
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
        if target.scheme == "none":
            return "replay: the scheme signs nothing (signing.scheme: none), so no delivery can be forged"
        return None

    def skipped_variants(self, target: Target) -> dict[str, str]:
        return skipped(target)

    def planned(
        self, target: Target, profile: ProviderProfile, settings: RunSettings
    ) -> tuple[PlannedDelivery, ...]:
        control = PlannedDelivery(event=0, kind="original", attempt=1, fault="none", at_ms=0.0, when="always")
        return (
            control,
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
        other = foreign_secret(target.scheme, hashlib.sha256(events[0].event_id.encode()).digest())
        forged = []
        for event, kind in zip(events[1:], kinds, strict=True):
            if kind == "replay-stale":
                sent = await trial.send(event, kind=kind, timestamp=int(time.time()) - STALE_AGE_S)
            elif kind == "replay-tampered":
                sent = await trial.send(conflicting(event, TAMPER), kind=kind, signed_body=event.body)
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
