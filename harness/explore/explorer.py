"""The schedule explorer: Hypothesis generates delivery schedules, shrinks a failing one, and the
lab writes it as a replayable incident.

    acklab explore --target fixture:unsafe --budget 100     # exit 1 + the minimal schedule
    acklab replay out/<run>/incidents/<run>-explore.json     # re-runs exactly that schedule

A `RuleBasedStateMachine` whose rules are schedule steps (`harness.explore.schedules.Step`) over a
few events drives one served target; each example is a fresh trial with fresh event ids,
and the invariants are checked after every step. A step that breaks one fails the
example; Hypothesis shrinks it to a minimal schedule, which is replayed last, recorded,
and written as an incident (``incident.schedule``). A lab error is never a counterexample.
"""

from __future__ import annotations

import asyncio
import secrets
import threading
from collections.abc import Coroutine
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import hypothesis
from hypothesis import HealthCheck, Verbosity
from hypothesis import strategies as st
from hypothesis.errors import FlakyFailure
from hypothesis.stateful import RuleBasedStateMachine, get_state_machine_test, rule

from acklab.evidence.documents.incident import Incident
from acklab.evidence.documents.records import Violation
from acklab.harness.core.bursts import check_burst_sync
from acklab.harness.core.lab import Lab
from acklab.harness.core.plan import RunSettings, TrialPlan, event_ids
from acklab.harness.errors import HarnessError
from acklab.harness.explore.schedules import ScheduleRunner, Step
from acklab.harness.targets import Needs, Target

T = TypeVar("T")
EVENTS = 3  # event indices a schedule plays with: enough for reordering, small enough to shrink
STEPS = 6  # steps per example
MAX_BURST = 4


class Counterexample(AssertionError):
    """A schedule broke an invariant (what Hypothesis shrinks)."""


class LabFailure(Exception):
    """The lab, not the handler, failed during an example; never shrunk into a verdict."""


@dataclass
class Failure:
    runner: ScheduleRunner
    violations: list[Violation]


@dataclass
class LabSession:
    """A target served on an event loop of its own, so Hypothesis (sync) can drive async deliveries."""

    target: Target
    seed: int
    salt: str = ""
    settings: RunSettings = field(default_factory=RunSettings)
    examples: int = 0
    last_failure: Failure | None = None
    lab_error: str | None = None

    def __post_init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="acklab-explore", daemon=True)
        self._stack = AsyncExitStack()
        self._lab: Lab | None = None

    def __enter__(self) -> LabSession:
        self._thread.start()
        try:
            self.call(self.target.preflight())
            self.call(check_burst_sync(self.target, self.settings.burst_sync))
            self._lab = self.call(
                self._stack.enter_async_context(Lab.open(self.target, Needs(socket=True), self.settings))
            )
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.call(self._stack.aclose())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            self._loop.close()

    def call(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def new_runner(self) -> ScheduleRunner:
        """A fresh trial: the next example's own event ids, so no example sees another's effects."""
        if self._lab is None:
            raise HarnessError("the explorer's lab is not open")
        index = self.examples
        self.examples += 1
        ids, orders = event_ids(self.seed, "explore", index, EVENTS, self.salt)
        plan = TrialPlan(f"explore-{index:04d}", "explore", index, ids, orders, (), self.salt)
        from acklab.harness.core.trial import TrialContext

        return ScheduleRunner(TrialContext(self._lab, plan), self.target.expect)

    def step(self, runner: ScheduleRunner, step: Step) -> list[Violation]:
        try:
            return self.call(runner.run(step))
        except HarnessError as exc:
            self.lab_error = str(exc)
            raise LabFailure(str(exc)) from exc


def _machine(session: LabSession) -> type[RuleBasedStateMachine]:
    events = st.integers(0, EVENTS - 1)

    class DeliverySchedules(RuleBasedStateMachine):
        """Rules are schedule steps; every step is checked against the invariants when it ends."""

        def __init__(self) -> None:
            super().__init__()
            self.runner = session.new_runner()

        def _do(self, step: Step) -> None:
            found = session.step(self.runner, step)
            if found:
                session.last_failure = Failure(self.runner, found)
                raise Counterexample("; ".join(v.detail for v in found))

        @rule(k=events)
        def send(self, k: int) -> None:
            self._do(Step("send", k))

        @rule(k=events, n=st.integers(2, MAX_BURST))
        def burst(self, k: int, n: int) -> None:
            self._do(Step("burst", k, n))

        @rule(k=events)
        def lost_ack(self, k: int) -> None:
            self._do(Step("lost-ack", k))

        @rule(k=events)
        def conflict(self, k: int) -> None:
            self._do(Step("conflict", k))

        # Beyond one event, where the target has the sections (harness.explore.objects).
        objects = session.target.objects
        if len(objects.lifecycle) >= 2:
            # One lifecycle object per schedule: any permutation of its events is a few steps away.
            @rule(n=st.integers(1, len(objects.lifecycle)))
            def reorder(self, n: int) -> None:
                self._do(Step("reorder", 0, n))

        if objects.siblings:

            @rule(k=events, n=st.integers(1, len(objects.siblings)))
            def sibling(self, k: int, n: int) -> None:
                self._do(Step("sibling", k, n))

        if objects.competitor is not None and session.target.object_reads().count:

            @rule(k=events)
            def competitor(self, k: int) -> None:
                self._do(Step("competitor", k))

    return DeliverySchedules


@dataclass
class Exploration:
    """What a budget found: the minimal failing schedule and its violations, or nothing."""

    examples: int
    failure: Failure | None
    flaky: bool = False


def explore_target(session: LabSession, budget: int) -> Exploration:
    """Run up to ``budget`` examples; shrink the first failure found."""
    settings = hypothesis.settings(
        max_examples=budget,
        stateful_step_count=STEPS,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
        verbosity=Verbosity.quiet,
        report_multiple_bugs=False,
        print_blob=False,
    )
    test = hypothesis.seed(session.seed)(get_state_machine_test(_machine(session), settings=settings))
    try:
        with hypothesis.reporting.with_reporter(lambda _: None):
            test()
    except LabFailure as exc:
        raise HarnessError(f"the lab failed while exploring: {exc}") from exc
    except Counterexample:
        return Exploration(session.examples, session.last_failure)
    except FlakyFailure as exc:
        if session.lab_error is not None:
            raise HarnessError(f"the lab failed while exploring: {session.lab_error}") from exc
        # A schedule failed once but not on every rerun (a race): still a finding, reported as such.
        return Exploration(session.examples, session.last_failure, flaky=True)
    return Exploration(session.examples, None)


def replay_schedule(session: LabSession, schedule: list[Step]) -> Failure:
    """Run exactly ``schedule`` once on a fresh trial; every violation it shows (possibly none)."""
    runner = session.new_runner()
    violations: list[Violation] = []
    for step in schedule:
        violations += session.step(runner, step)
    return Failure(runner, violations)


def new_seed() -> int:
    return secrets.randbits(32)


def load_incident(path: Path) -> Incident:
    """An explorer incident (validated), for `acklab replay`."""
    from acklab.evidence.errors import EvidenceError
    from acklab.evidence.loading import load_evidence_json
    from acklab.harness.errors import SpecError

    try:
        doc = Incident.read(load_evidence_json(path), what=str(path))
    except (OSError, ValueError, EvidenceError) as exc:
        raise SpecError(f"INCIDENT: {path} is not a readable acklab incident: {exc}") from exc
    if not doc.schedule:
        raise SpecError(
            f"INCIDENT: {path} has no schedule; only incidents written by `acklab explore` can be replayed"
        )
    return doc
