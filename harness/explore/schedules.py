"""Delivery schedules: steps over a few events, run against a target with a model of what is allowed.

A schedule is a list of `Step`s — send an event (again), a burst of identical deliveries
released together, a lost acknowledgement, a conflicting body under a used id — over a
handful of event indices, so retries, duplicates and reordering all arise from the order
of the steps. Beyond one event (`harness.explore.objects`), on a target with the sections:
``reorder`` delivers one event of an object's lifecycle (the steps' order is the arrival
order), ``sibling`` one of the event's siblings, ``competitor`` the app's own request for the
event's order. `ScheduleRunner` runs steps one at a time on a `TrialContext` and checks the
invariants after each one against a small model (which body was accepted, whether an
answer was 2xx), reading the effects back from the target.

The explorer (`harness.explore.explorer`) generates schedules; `acklab replay` reruns one exactly.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

from acklab.evidence.documents.records import Violation
from acklab.evidence.documents.verdicts import Invariant
from acklab.harness.core.bursts import send_burst
from acklab.harness.core.trial import TrialContext
from acklab.harness.errors import HarnessError, SpecError
from acklab.harness.explore.objects import ObjectSteps
from acklab.harness.targets import Expect
from acklab.harness.wire.faults import LostAck, NoFault
from acklab.harness.wire.records import DeliveryRecord
from acklab.harness.wire.templates import WebhookEvent, conflicting

Op: TypeAlias = Literal["send", "burst", "lost-ack", "conflict", "reorder", "sibling", "competitor"]
OPS: tuple[Op, ...] = ("send", "burst", "lost-ack", "conflict", "reorder", "sibling", "competitor")
OBJECT_OPS = frozenset({"reorder", "sibling", "competitor"})


@dataclass(frozen=True)
class Step:
    """One step of a schedule: an operation on event ``event`` (``n`` deliveries for a burst)."""

    op: Op
    event: int
    n: int = 1

    def record(self) -> dict[str, Any]:
        return {"op": self.op, "event": self.event, "n": self.n}

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> Step:
        op, event, n = record.get("op"), record.get("event"), record.get("n", 1)
        if op not in OPS or not isinstance(event, int) or event < 0 or not isinstance(n, int) or n < 1:
            raise SpecError(
                f"schedule step: got {record!r}; expected {{op: one of {', '.join(OPS)}, event: >= 0, n: >= 1}}"
            )
        return cls(op, event, n)

    def __str__(self) -> str:
        if self.op == "reorder":
            return f"reorder(lifecycle event {self.n} of event {self.event}'s object)"
        if self.op == "sibling":
            return f"sibling({self.n} of event {self.event})"
        if self.op == "competitor":
            return f"competitor(the app's own request for event {self.event}'s order)"
        return f"{self.op}(event {self.event}{f', x{self.n}' if self.op == 'burst' else ''})"


@dataclass
class EventModel:
    """What the lab knows of one event: the body the handler accepted, and whether it answered 2xx."""

    accepted: bytes | None = None
    acked: bool = False
    effects: int = 0
    attempts: int = 0
    touched: bool = False


def _ok(status: int | None) -> bool:
    return status is not None and 200 <= status < 300


@dataclass
class ScheduleRunner:
    """Runs the steps of one schedule on one trial and checks the invariants after each step."""

    trial: TrialContext
    expect: Expect
    models: dict[int, EventModel] = field(default_factory=dict)
    steps: list[Step] = field(default_factory=list)
    violations: list[Violation] = field(default_factory=list)
    objects: ObjectSteps | None = None

    async def run(self, step: Step) -> list[Violation]:
        """Run ``step``; the violations it revealed (empty when the invariants hold)."""
        if step.op in OBJECT_OPS:
            if self.objects is None:
                self.objects = ObjectSteps(self.trial, self.expect, self.models)
            self.steps.append(step)
            found = await self.objects.run(len(self.steps) - 1, step)
            self.violations += found
            return found
        index = len(self.steps)
        self.steps.append(step)
        event = self.trial.event(step.event)
        model = self.models.setdefault(step.event, EventModel())
        shared = self.objects is not None and self.objects.shares(step.event)
        if not model.touched:
            before = await self.trial.observe(event, "before")
            if before.effects and not shared:  # its object may hold a sibling's or the app's own effect
                raise HarnessError(
                    f"{event.event_id} had {before.effects} effect(s) before its first delivery; reused ids"
                )
            model.touched = True
        body = conflicting(event, self.trial.lab.target.conflict_set) if step.op == "conflict" else event
        records = await self._deliver(step, body, model)
        if not await self.trial.lab.transport.quiesce(self.trial.lab.horizon_s):
            raise HarnessError(f"step {index} ({step}): the handler never answered within the lab's horizon")
        # Once siblings or the app's own request touched its object, the count is the object's.
        if self.objects is not None and shared:
            effects = await self.objects.count(index, step.event)
        else:
            effects = (await self.trial.observe(event, f"after-step-{index}")).effects
        found = self._check(
            index=index,
            step=step,
            event=event,
            body=body.body,
            model=model,
            records=records,
            effects=effects,
            per_object=shared,
        )
        self.violations += found
        return found

    async def _deliver(self, step: Step, body: WebhookEvent, model: EventModel) -> list[DeliveryRecord]:
        trial = self.trial
        model.attempts += 1
        if step.op == "burst":
            prepared = [
                trial.prepare(body, kind="duplicate", attempt=model.attempts, fault=NoFault())
                for _ in range(step.n)
            ]
            # The same sender as concurrent-duplicates (harness.core.bursts), released as settings say.
            await send_burst(trial, prepared, trial.lab.settings.burst_sync)
            return [record for _, record in prepared]
        kind = "conflict" if step.op == "conflict" else ("original" if model.attempts == 1 else "retry")
        fault = LostAck() if step.op == "lost-ack" else NoFault()
        return [await trial.send(body, kind=kind, attempt=model.attempts, fault=fault)]

    def _check(
        self,
        *,
        index: int,
        step: Step,
        event: WebhookEvent,
        body: bytes,
        model: EventModel,
        records: list[DeliveryRecord],
        effects: int,
        per_object: bool = False,
    ) -> list[Violation]:
        found: list[Violation] = []

        def violate(invariant: Invariant, observed: int | str | None, expected: str, detail: str) -> None:
            found.append(
                Violation(
                    invariant=invariant,
                    event_id=event.event_id,
                    observed=observed,
                    expected=expected,
                    detail=f"after step {index} ({step}): {detail}",
                    trial=self.trial.plan.trial_id,
                )
            )

        statuses = [r.status for r in records]
        differs = model.accepted is not None and body != model.accepted
        if differs:
            ignore = self.expect.conflict == "ignore"  # dedupe by id: a 2xx, and nothing changed
            rejected = [
                s for s in statuses if (not _ok(s) if ignore else s not in self.expect.conflict_status)
            ]
            if rejected:
                wanted = "a 2xx" if ignore else " or ".join(map(str, self.expect.conflict_status))
                violate(
                    "conflict-rejected",
                    rejected[0],
                    wanted,
                    "a body that differs from the accepted one was answered " + str(rejected[0]),
                )
            if effects != model.effects:
                violate(
                    "conflict-rejected",
                    effects,
                    f"== {model.effects}",
                    "a differing body changed the effect count",
                )
        elif any(_ok(s) for s in statuses):
            model.accepted, model.acked = body, True
        if effects > self.expect.max_effects:
            violate(
                "at-most-once-per-object" if per_object else "at-most-once-effect",
                effects,
                f"<= {self.expect.max_effects}",
                f"{model.attempts} steps on one event "
                + ("and its object's siblings or the app's own request " if per_object else "")
                + f"left {effects} side effects (statuses of this step: {statuses})",
            )
        if model.acked and effects == 0:
            violate(
                "acked-exactly-once", effects, "== 1", "the handler answered 2xx but no side effect exists"
            )
        model.effects = effects
        return found
