"""``replay``: deliveries a verifier must reject — stale timestamp, tampered body, foreign secret.

Each variant carries an event id of its own that the handler has never seen, so a
rejection can only come from signature/timestamp verification, not from dedupe. A
control event (valid, fresh) must be accepted first: a target that rejects everything
proves nothing and is reported as a lab error.
"""

from __future__ import annotations

import hashlib
import time
from typing import ClassVar

from acklab.harness.experiments.base import Experiment
from acklab.harness.plan import PlannedDelivery, Settings
from acklab.harness.providers import ProviderProfile
from acklab.harness.signing import foreign_secret, signs_timestamp
from acklab.harness.targets import Target
from acklab.harness.templates import conflicting
from acklab.harness.trial import TrialContext

STALE_AGE_S = 3600  # far beyond the 300 s every reference verifier allows
TAMPER = {"acklab_tampered": True}


def variants(target: Target) -> tuple[str, ...]:
    stale = ("replay-stale",) if signs_timestamp(target.scheme, target.secret) else ()
    return (*stale, "replay-tampered", "replay-foreign-secret")


class ReplayExperiment(Experiment):
    name = "replay"
    description = (
        "A valid control delivery, then deliveries that must be rejected with no effect: a stale signed "
        f"timestamp ({STALE_AGE_S} s old; schemes that sign one), a tampered body under a valid signature, "
        "and a signature made with another secret."
    )
    invariants: ClassVar[tuple[str, ...]] = ("at-most-once-effect", "acked-exactly-once", "replay-rejected")

    def events(self, target: Target) -> int:
        return 1 + len(variants(target))

    def applicable(self, target: Target) -> str | None:
        if target.scheme == "none":
            return "replay needs a signing scheme; this target's signing.scheme is 'none'"
        return None

    def planned(
        self, target: Target, profile: ProviderProfile, settings: Settings
    ) -> tuple[PlannedDelivery, ...]:
        control = PlannedDelivery(event=0, kind="original", attempt=1, fault="none", at_ms=0.0, when="always")
        return (
            control,
            *(
                PlannedDelivery(event=k, kind=kind, attempt=1, fault="none", at_ms=0.0, when="always")
                for k, kind in enumerate(variants(target), start=1)
            ),
        )

    async def run(self, trial: TrialContext) -> None:
        target = trial.lab.target
        kinds = variants(target)
        events = [trial.event(k) for k in range(1 + len(kinds))]
        for event in events:
            await trial.observe(event, "before")
        await trial.deliver(events[0])
        other = foreign_secret(target.scheme, hashlib.sha256(trial.plan.event_ids[0].encode()).digest())
        for event, kind in zip(events[1:], kinds, strict=True):
            if kind == "replay-stale":
                await trial.send(event, kind=kind, timestamp=int(time.time()) - STALE_AGE_S)
            elif kind == "replay-tampered":
                await trial.send(conflicting(event, TAMPER), kind=kind, signed_body=event.body)
            else:
                await trial.send(event, kind=kind, secret=other)
        trial.parameters["replay_variants"] = list(kinds)
        trial.parameters["stale_age_s"] = STALE_AGE_S
        await trial.settle(events)
