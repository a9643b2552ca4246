"""Verdicts, computed from a trial's records alone (so a bundle can be re-judged later).

Invariants:

* ``at-most-once-effect``: once settled, no event has more than ``max_effects`` effects.
* ``acked-exactly-once``: an event the *handler* answered 2xx (whatever the sender saw) has
  at least one effect within ``expect.effects_within_s`` of that answer.
* ``eventually-acknowledged``: within the provider's attempts the *sender receives* a 2xx for
  each event (`Delivery.received`). A 2xx the lab's fault kept from the sender (lost-ack's
  synthetic 504, a reset, a short first timeout) is no acknowledgement: the retries must then
  get one — a duplicate of a processed event answered 4xx/5xx is a violation naming the
  statuses. Every attempt answered 5xx, not answered within the sender's timeout (a handler
  that hangs) or closed without an answer is a violation whatever the effects probe could
  read: the provider retries until it disables the endpoint. Answers given while the lab's
  own service was booting or restarting (refused, 502/503/504 before readiness), and
  connections the lab could not open at all, are the lab's problem: the trial is an error.
* ``conflict-rejected``: a conflicting body under a used event id is answered as
  ``expect.conflict`` says — one of ``conflict_status`` (``reject``) or a 2xx (``ignore``) —
  and changes neither the effect count nor the probed state.
* ``replay-rejected``: a stale, tampered or foreign-signed delivery gets no 2xx and leaves
  no effect.
* ``no-2xx-without-commit`` (database-link faults): a delivery answered 2xx before the
  ``after-fault`` observation must have committed — that observation may not read 0.
* ``newest-state-wins``, ``state-never-regresses``, ``at-most-once-per-object``: beyond one
  event, judged per object in `harness.core.object_verdicts`.
* Effects outside the database (``effects.smtp``, ``effects.outbound``): ``at-most-once-effect``
  per source (``emails``, ``calls``), ``idempotent-outbound``, ``no-effect-without-commit``;
  judged in `harness.core.sink_verdicts`.
* ``schema-unchanged`` (a checkout served by the lab, `harness.targets.schema_pin`): the
  schema the lab created and pinned before the handler started is the schema every count read
  and the one left at the end of the run. A renamed table, a view, a trigger is a violation:
  a count the handler could redefine proves nothing.

What makes a verdict trustworthy:

* A trial's fault must have landed (``fault.tries``, `harness.core.proofs`). Events of a try
  whose fault did not land are still judged for violations — a double effect is one however
  it came — but a trial where no try landed is an ``error``, never a ``pass``.
* The count judged is the last one read: when the final re-read at the end of the run
  (observation ``late``) found more effects than the trial saw, the verdict follows the
  late count and says so; a late read that failed makes a trial without a violation an
  error.
* Each violation names the delivery that caused it (``delivery``): the retry after the
  original's confirmed commit, the control delivery of a replay rather than a forged one.
* A proven violation outweighs a lab error: the trial is ``fail`` and its errors are kept.

A missing observation, or a target that never accepted a valid delivery, is a lab error
(verdict ``error``), never a pass.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from acklab.evidence.documents.records import (
    DELIVERED_KINDS,
    Delivery,
    EffectSource,
    Observation,
    Violation,
    ViolationDelivery,
)
from acklab.evidence.documents.trial import Trial
from acklab.evidence.documents.verdicts import INVARIANTS, Invariant, Verdict, combine
from acklab.harness.core.ack_verdicts import judge_unacknowledged
from acklab.harness.core.conflict_verdicts import judge_conflict
from acklab.harness.core.object_verdicts import judge_objects
from acklab.harness.core.sink_verdicts import judge_sinks
from acklab.harness.core.total_verdicts import judge_totals
from acklab.harness.targets import Expect

__all__ = ["INVARIANTS", "Judgement", "combine", "judge"]


@dataclass
class Judgement:
    """A trial's verdict with its violations and the lab errors that prevent one."""

    trial_id: str
    violations: list[Violation] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    provider: str | None = None  # the scheme the trial's sender imitated (what it does when it gives up)

    @property
    def verdict(self) -> Verdict:
        if self.violations:
            return "fail"
        return "error" if self.errors else "pass"

    def violate(
        self,
        invariant: Invariant,
        event_id: str,
        observed: int | str | None,
        expected: str,
        detail: str,
        *,
        delivery: Delivery | None = None,
        source: EffectSource | None = None,
    ) -> None:
        cause = None
        if delivery is not None:
            cause = ViolationDelivery(seq=delivery.seq, kind=delivery.kind, attempt=delivery.attempt)
        self.violations.append(
            Violation(
                invariant=invariant,
                event_id=event_id,
                observed=observed,
                expected=expected,
                detail=detail,
                trial=self.trial_id,
                delivery=cause,
                source=source,
            )
        )


def _named(delivery: Delivery) -> str:
    return f"the {delivery.kind} delivery seq {delivery.seq} (attempt {delivery.attempt})"


@dataclass(frozen=True)
class Counts:
    """One event's effects: when the trial judged them, and (if re-read) at the end of the run."""

    judged: int
    late: int | None

    @property
    def last(self) -> int:
        # A count that shrank later proves nothing away: a violation seen stays seen.
        return self.judged if self.late is None else max(self.judged, self.late)

    @property
    def grew(self) -> bool:
        return self.late is not None and self.late > self.judged

    def note(self) -> str:
        if not self.grew:
            return ""
        return (
            f" (read {self.judged} when the trial was judged, {self.late} at the end of the run: effects "
            "appeared after the trial was judged)"
        )


def judge(trial: Trial, expect: Expect) -> Judgement:
    """The judgement of one trial record (its deliveries, observations and fault proof)."""
    provider = trial.parameters.get("provider")
    result = Judgement(trial.trial_id, provider=provider if isinstance(provider, str) else None)
    fault = trial.fault
    tries = fault.tries if fault is not None else []
    _judge_events(
        result,
        trial,
        expect,
        unproven={e for t in tries if not t.landed for e in t.event_ids},
        some_landed=fault is None or fault.landed,
    )
    if fault is not None and not fault.landed:
        whys = "; ".join(f"try {t.try_}: {t.evidence}" for t in tries)
        result.errors.append(
            f"the fault {fault.name!r} never landed in {len(tries)} tr{'y' if len(tries) == 1 else 'ies'} "
            f"on fresh events ({whys}); these deliveries are no evidence of how the handler survives it"
        )
    judge_totals(result, trial)
    _judge_the_run_around(result, trial)
    return result


def _judge_events(
    result: Judgement, trial: Trial, expect: Expect, *, unproven: set[str], some_landed: bool
) -> None:
    """Each object the trial played, then each event outside them; a try whose fault did not
    land lends its violations but not its errors, unless no try landed."""
    replay = any(d.kind.startswith("replay-") for d in trial.deliveries)
    # Beyond one event: an object's events are judged together (harness.core.object_verdicts).
    objects = judge_objects(trial, expect)
    played = {e for judged in objects for e in judged.event_ids}
    for judged in objects:
        result.violations.extend(judged.violations)
        if not (judged.event_ids & unproven) or not some_landed:
            result.errors.extend(judged.errors)
    for event_id in (e for e in trial.event_ids if e not in played):
        event = Judgement(result.trial_id, provider=result.provider)
        _judge_event(event, trial, event_id, expect, control=replay)
        result.violations.extend(event.violations)
        # A try whose fault did not land only lends its violations once another try landed.
        if event_id not in unproven or not some_landed:
            result.errors.extend(event.errors)


def _judge_the_run_around(result: Judgement, trial: Trial) -> None:
    """What happened around the trial: the pinned schema changed, the run's late re-read failed."""
    if trial.schema_change:
        result.violate(
            "schema-unchanged",
            trial.event_ids[0] if trial.event_ids else "-",
            trial.schema_change[:500],
            "the schema the lab pinned",
            f"the database schema the lab pinned (created from the models, or made by the spec's setup:) changed while the handler ran "
            f"({trial.schema_change[:500]}); what the counts read is no longer what the lab counts",
        )
    late = trial.late_read
    if late is not None and late.error:
        result.errors.append(
            f"the final re-read of the effects at the end of the run failed ({late.error}): effects that "
            "appeared after this trial was judged cannot be ruled out"
        )


def _judge_event(result: Judgement, trial: Trial, event_id: str, expect: Expect, *, control: bool) -> None:
    mine = [d for d in trial.deliveries if d.event_id == event_id]
    before = trial.observation(event_id, "before")
    final = trial.observation(event_id, "final")
    if not mine:
        result.errors.append(f"{event_id}: no delivery was recorded")
        return
    if before is None or final is None:
        missing = "before" if before is None else "final"
        # A handler that never answered is judged from the deliveries alone: an unreadable
        # probe (a handler holding its database locked, say) does not turn its hang into the lab's.
        delivered = [d for d in mine if d.kind in DELIVERED_KINDS]
        if delivered and not any(d.received for d in delivered):
            hung = Judgement(result.trial_id, provider=result.provider)
            judge_unacknowledged(hung, event_id, delivered, None, timeout_s=_sender_timeout(trial), role="")
            result.violations.extend(hung.violations)
        result.errors.append(f"{event_id}: no {missing!r} effects observation was recorded")
        return
    if before.effects != 0:
        result.errors.append(
            f"{event_id}: already had {before.effects} effect(s) before the trial; the event id was "
            "used before against this database (reused --seed?); run with another seed"
        )
        return
    late = trial.observation(event_id, "late")
    counts = Counts(final.effects, late.effects if late is not None else None)
    if any(d.kind.startswith("replay-") for d in mine):
        _judge_replay(result, event_id, mine, counts)
        return
    if not _judge_delivered(
        result, event_id, trial=trial, mine=mine, counts=counts, expect=expect, control=control
    ):
        return
    if any(d.kind == "conflict" for d in mine):
        judge_conflict(result, event_id, trial=trial, mine=mine, counts=counts, expect=expect)
    _judge_fault_window(result, event_id, mine, trial.observation(event_id, "after-fault"))
    failed = (trial.parameters.get("failed_sources") or {}).get(event_id, ())
    judge_sinks(
        result,
        event_id,
        mine=mine,
        final=final,
        late=late,
        rows=counts.last,
        expect=expect,
        failed=tuple(failed),
    )


def sinks_seen(trial: Trial, event_id: str) -> bool:
    final = trial.observation(event_id, "final")
    return final is not None and final.sinks_seen


def _extra_cause(mine: Sequence[Delivery], trial: Trial) -> tuple[Delivery, str] | None:
    """The delivery that brought an effect beyond the first, and why it is the one."""
    reached = [d for d in mine if d.kind in DELIVERED_KINDS or d.kind == "conflict"]
    seqs = {d.seq for d in mine}
    confirmed = [c for c in trial.commit_confirmations if c.confirmed and c.seq in seqs]
    if confirmed:
        after = [d for d in reached if d.seq > confirmed[0].seq]
        if after:
            return after[0], f"sent after the commit of seq {confirmed[0].seq} was confirmed"
    if len(reached) > 1:
        if reached[1].kind == "duplicate":
            return reached[1], f"one of {len(reached)} duplicates released together"
        return reached[1], f"sent after seq {reached[0].seq} had reached the handler"
    return None


def _judge_delivered(
    result: Judgement,
    event_id: str,
    *,
    trial: Trial,
    mine: Sequence[Delivery],
    counts: Counts,
    expect: Expect,
    control: bool,
) -> bool:
    """at-most-once, acked-exactly-once, eventually-acknowledged; False: nothing more to judge."""
    delivered = [d for d in mine if d.kind in DELIVERED_KINDS]
    acked = [d for d in delivered if d.acknowledged]
    role = "the control event (valid and fresh, not a forged delivery): " if control else ""
    genuine = (trial.parameters.get("genuine") or {}).get(event_id)
    if genuine:
        role = ""  # a genuine variant, not the control of a replay
    if not any(d.received for d in delivered) and not judge_unacknowledged(
        result,
        event_id,
        delivered,
        counts.last,
        timeout_s=_sender_timeout(trial),
        role=role,
        genuine=str(genuine) if genuine else None,
    ):
        return False
    if counts.last > expect.max_effects:
        statuses = ", ".join(str(d.status) for d in mine)
        cause = _extra_cause(mine, trial)
        blame = f"; the extra effects came with {_named(cause[0])}, {cause[1]}" if cause else ""
        result.violate(
            "at-most-once-effect",
            event_id,
            counts.last,
            f"<= {expect.max_effects}",
            f"{role}{len(mine)} deliveries of one event left {counts.last} side effects "
            f"(handler statuses: {statuses}){blame}{counts.note()}",
            delivery=cause[0] if cause else None,
            # beside the sinks' emails and calls, the database's count is the source "rows"
            source="rows" if sinks_seen(trial, event_id) else None,
        )
    if acked and counts.judged == 0:
        first = acked[0]
        waited = (
            f" within expect.effects_within_s={expect.effects_within_s:g} s"
            if expect.effects_within_s
            else ""
        )
        if counts.last:
            detail = (
                f"{role}the handler answered {first.status} to delivery seq {first.seq} but no side "
                f"effect existed{waited} when the trial was judged; {counts.last} appeared only by the end "
                "of the run — if this consumer acknowledges first and works afterwards, set "
                "expect.effects_within_s"
            )
        else:
            served = (trial.parameters.get("api_faults") or {}).get(event_id)
            if served:
                hint = (
                    f"; while it was handled the provider's API answered {', '.join(served[:3])}: an event "
                    "acknowledged without its effect is never sent again (answer 5xx so the provider retries)"
                )
            elif trial.jobs is not None:  # behind a queue: the count was read once it drained
                hint = " once the queue drained: no job made it (was it ever enqueued?)"
            elif expect.effects_within_s:
                hint = ""
            else:
                hint = (
                    " (if this consumer acknowledges first and works afterwards, set "
                    "expect.effects_within_s to how long the work may take)"
                )
            detail = (
                f"{role}the handler answered {first.status} to delivery seq {first.seq} but no side "
                f"effect exists{waited}{hint}"
            )
        result.violate("acked-exactly-once", event_id, counts.judged, "== 1", detail, delivery=first)
    return True


def _sender_timeout(trial: Trial) -> float | None:
    value = trial.parameters.get("sender_timeout_s")
    return float(value) if isinstance(value, int | float) else None


def _judge_replay(result: Judgement, event_id: str, mine: Sequence[Delivery], counts: Counts) -> None:
    for delivery in mine:
        variant = delivery.kind.removeprefix("replay-")
        if delivery.status is None:
            result.errors.append(f"{event_id}: the {variant} delivery got no answer ({delivery.error})")
        elif delivery.acknowledged:
            result.violate(
                "replay-rejected",
                event_id,
                delivery.status,
                "a 4xx",
                f"a {variant} delivery (forged; seq {delivery.seq}) was accepted with {delivery.status}",
                delivery=delivery,
            )
    if counts.last:
        variant = mine[0].kind.removeprefix("replay-")
        result.violate(
            "replay-rejected",
            event_id,
            counts.last,
            "== 0",
            f"a {variant} delivery (forged; seq {mine[0].seq}) left {counts.last} side effect(s){counts.note()}",
            delivery=mine[0],
        )


def _judge_fault_window(
    result: Judgement, event_id: str, mine: Sequence[Delivery], after: Observation | None
) -> None:
    """no-2xx-without-commit: a 2xx answered while the database link was broken needs its commit."""
    if after is None or after.effects != 0 or after.after_seq is None:
        return
    for delivery in mine:
        if delivery.kind in DELIVERED_KINDS and delivery.acknowledged and delivery.seq <= after.after_seq:
            result.violate(
                "no-2xx-without-commit",
                event_id,
                delivery.status,
                "a 5xx",
                f"the handler answered {delivery.status} to delivery seq {delivery.seq} during a fault on "
                "its database link, and nothing was committed once the fault was lifted",
                delivery=delivery,
            )
            return
