"""The schedule explorer on an app object, from Python: what ``webhook_lab.explore`` runs.

``explore_app(app, budget=50, endpoint=..., secret=..., effects=...)`` describes the app as
`acklab.attack` does (`harness.targets.app_spec`), serves it in this process, lets Hypothesis
generate delivery schedules until one breaks an invariant, shrinks it, and writes the
explorer's bundle (`harness.explore.bundle`) under `out`. The same seed replays the same
search (``--acklab-seed``); the result says which.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Unpack

from acklab.evidence.clock import utcnow
from acklab.evidence.documents.records import Violation
from acklab.harness.engine.options import ExploreOptions, app_target_of, check_keywords
from acklab.harness.engine.runner import new_run_id
from acklab.harness.errors import SpecError
from acklab.harness.procs.leases import leasing

MAX_BUDGET = 10_000


@dataclass(frozen=True)
class ExploreResult:
    """What a budget of schedules found: ``passed``, the shrunk ``schedule`` and its ``violations``,
    the ``seed`` that replays the search, the ``bundle`` (and its ``incident``)."""

    target: str
    seed: int
    budget: int
    examples: int
    schedule: tuple[str, ...]
    violations: tuple[Violation, ...]
    bundle: Path
    incident: Path | None
    flaky: bool = False
    rerun: str | None = field(default=None, compare=False)

    @property
    def passed(self) -> bool:
        return not self.violations

    @property
    def verdict(self) -> str:
        return "pass" if self.passed else "fail"

    def explain(self) -> str:
        """For a person: the verdict, the minimal schedule, each violation, where the evidence is."""
        searched = f"{self.examples} schedule(s) of a budget of {self.budget}, seed {self.seed}"
        if self.passed:
            return f"acklab explore: {self.target} passed: no invariant broken in {searched}; evidence: {self.bundle}"
        flaky = " (flaky: it failed once, not on every rerun)" if self.flaky else ""
        lines = [
            f"acklab explore: {self.target} FAILED in {searched}{flaky}; the shrunk schedule "
            f"({len(self.schedule)} step(s)):",
            *(f"  {n}. {step}" for n, step in enumerate(self.schedule, 1)),
            *(f"  violated {v.invariant} on {v.event_id}: {v.detail}" for v in self.violations),
            f"  incident: {self.incident} (acklab replay {self.incident})",
            f"  evidence: {self.bundle}",
        ]
        if self.rerun:
            lines.append(f"  reproduce: {self.rerun}")
        return "\n".join(lines)


def explore_app(
    app: Any, *, budget: int = 50, default_name: str = "app", **options: Unpack[ExploreOptions]
) -> ExploreResult:
    """Search delivery schedules against `app` (see the module docstring)."""
    check_keywords(options, ExploreOptions, "webhook_lab.explore()")
    if isinstance(budget, bool) or not isinstance(budget, int) or not 1 <= budget <= MAX_BUDGET:
        raise SpecError(f"budget: got {budget!r}; expected a number of schedules from 1 to {MAX_BUDGET}")
    from acklab.evidence.extras import require

    require("explore", "hypothesis", "webhook_lab.explore (the schedule explorer)")
    from acklab.harness.explore.bundle import write_bundle
    from acklab.harness.explore.explorer import LabSession, explore_target, new_seed

    target = app_target_of(app, options, serving="socket", allow_remote=False, default_name=default_name)
    seed = options.get("seed")
    seed = new_seed() if seed is None else seed
    out = Path(options.get("out", "out"))
    _ = target.revision  # the handler's commit, read before anything is written
    started_at, started = utcnow(), time.monotonic()
    run_id = new_run_id(None) + "-explore"
    try:
        with leasing(out, run_id, secrets=sorted(target.credentials())):
            try:
                with LabSession(target, seed) as session:
                    found = explore_target(session, budget)
            finally:
                asyncio.run(target.aclose())
    finally:
        if target.close is not None:
            target.close()
    failure = found.failure if found.failure and found.failure.violations else None
    bundle, incident = write_bundle(
        out,
        run_id=run_id,
        target=target,
        target_ref=f"app:{target.name}",
        seed=seed,
        started_at=started_at,
        failure=failure,
        parameters={"budget": budget, "examples_run": found.examples, "flaky": found.flaky},
        duration_ms=(time.monotonic() - started) * 1000,
    )
    return ExploreResult(
        target=target.name,
        seed=seed,
        budget=budget,
        examples=found.examples,
        schedule=tuple(str(step) for step in failure.runner.steps) if failure else (),
        violations=tuple(failure.violations) if failure else (),
        bundle=bundle,
        incident=bundle / incident if failure and incident else None,
        flaky=found.flaky,
    )
