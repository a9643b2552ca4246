"""Executing one experiment's trials against a served target, one checkpoint per trial."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from acklab.evidence.clock import utcnow
from acklab.evidence.documents.records import Observation
from acklab.evidence.documents.trial import TRIAL_SCHEMA, Trial
from acklab.harness.core.lab import Lab
from acklab.harness.core.plan import RunPlan, TrialPlan
from acklab.harness.core.run_events import (
    DeliveryRecorded,
    EventBus,
    ObservationRecorded,
    TrialFinished,
    TrialStarted,
)
from acklab.harness.core.trial import TrialContext
from acklab.harness.core.verdicts import judge
from acklab.harness.errors import HarnessError
from acklab.harness.experiments import Experiment
from acklab.harness.specs.credentials import redact
from acklab.harness.targets import Expect, Target
from acklab.harness.wire.records import DeliveryRecord


def trial_record(
    *,
    run_id: str,
    plan: RunPlan,
    trial: TrialPlan,
    target: Target,
    experiment: Experiment,
    started_at: str,
    duration_ms: float,
    ctx: TrialContext | None,
    error: str | None,
) -> Trial:
    """The trial's record with its verdict, judged from the record alone."""
    judged = [e for e in trial.event_ids[: experiment.events(target)] if ctx is None or e not in ctx.unjudged]
    record = Trial(
        schema=TRIAL_SCHEMA,
        run_id=run_id,
        trial_id=trial.trial_id,
        target=target.name,
        experiment=trial.experiment,
        index=trial.index,
        seed=plan.seed,
        event_ids=judged,
        started_at=started_at,
        ended_at=utcnow(),
        duration_ms=round(duration_ms, 3),
        verdict="error",
        deliveries=[d.document() for d in ctx.deliveries] if ctx else [],
        observations=list(ctx.observations) if ctx else [],
        commit_confirmations=list(ctx.confirmations) if ctx else [],
        violations=[],
        error=None,
        parameters={
            **(ctx.parameters if ctx else {}),
            "expect": target.expect.as_dict(),
            "sender_timeout_s": target.timeout_s,
            "provider": target.scheme,
            **({"id_salt": trial.salt} if trial.salt else {}),
        },
        # Library messages may quote a database URL; records show it as user:***@.
        lab_errors=[redact(e) for e in ([error] if error else []) + (ctx.errors if ctx else [])],
        fault=ctx.fault(experiment.fault_name) if ctx else None,
        objects=(ctx.objects or None) if ctx else None,
        schema_change=target.schema_change(),
        jobs=ctx.jobs() if ctx else None,
    )
    return rejudge(record)


def rejudge(record: Trial) -> Trial:
    """The record judged (again) from what it holds: its verdict, violations and error.

    A proven violation makes the trial ``fail`` even beside lab errors (kept in ``error``).
    """
    judgement = judge(record, Expect.from_dict(record.parameters["expect"]))
    # A trial the lab could not even start has nothing to judge: its cause is the whole story.
    untouched = bool(record.lab_errors) and not record.deliveries
    errors = record.lab_errors + ([] if untouched else [redact(e) for e in judgement.errors])
    return record.but(
        violations=judgement.violations,
        error="; ".join(errors) if errors else None,
        verdict="fail" if judgement.violations else ("error" if errors else "pass"),
    )


async def execute_experiment(
    experiment: Experiment,
    *,
    target: Target,
    plan: RunPlan,
    todo: Sequence[TrialPlan],
    run_id: str,
    bus: EventBus,
    checkpoint: Callable[[Trial], tuple[str, str]],
) -> None:
    """Run `todo` (the unfinished trials of `experiment`); each finished trial is checkpointed."""
    if not todo:
        return
    needs = experiment.needs(target, plan.settings)
    written: set[str] = set()
    try:
        async with Lab.open(target, needs, plan.settings, experiment.serve(target, needs)) as lab:
            for trial in todo:
                await _one(
                    experiment, lab=lab, plan=plan, trial=trial, run_id=run_id, bus=bus, checkpoint=checkpoint
                )
                written.add(trial.trial_id)
    except HarnessError as exc:
        # The lab could not serve the target for this experiment: every trial left is a lab error.
        for trial in todo:
            if trial.trial_id not in written:
                record = trial_record(
                    run_id=run_id,
                    plan=plan,
                    trial=trial,
                    target=target,
                    experiment=experiment,
                    started_at=utcnow(),
                    duration_ms=0.0,
                    ctx=None,
                    error=str(exc),
                )
                _finish(bus, run_id, trial, record, checkpoint)


def _finish(
    bus: EventBus,
    run_id: str,
    trial: TrialPlan,
    record: Trial,
    checkpoint: Callable[[Trial], tuple[str, str]],
) -> None:
    rel, sha256 = checkpoint(record)
    bus.emit(TrialFinished(run_id, record, rel, sha256))


async def _one(
    experiment: Experiment,
    *,
    lab: Lab,
    plan: RunPlan,
    trial: TrialPlan,
    run_id: str,
    bus: EventBus,
    checkpoint: Callable[[Trial], tuple[str, str]],
) -> None:
    started_at, started = utcnow(), time.monotonic()
    bus.emit(TrialStarted(run_id, trial.trial_id, trial.experiment, started_at))

    def delivered(record: DeliveryRecord) -> None:
        bus.emit(DeliveryRecorded(run_id, trial.trial_id, record.document()))

    def observed(observation: Observation) -> None:
        bus.emit(ObservationRecorded(run_id, trial.trial_id, observation))

    ctx = TrialContext(lab, trial, on_delivery=delivered, on_observation=observed)
    error: str | None = None
    down = lab.endpoint.down()
    try:
        if down is not None:
            # No delivery into a service that is not there: the cause, not a verdict on the handler.
            error = f"not run: the lab's own service is down and did not come back ({down})"
        else:
            await experiment.run(ctx)
    except HarnessError as exc:
        error = str(exc)
    except Exception as exc:  # a lab bug must end as verdict "error" (exit 4), never as a pass
        error = f"lab failure: {type(exc).__name__}: {exc}"
    if error is not None:
        await lab.transport.quiesce(lab.horizon_s)
    record = trial_record(
        run_id=run_id,
        plan=plan,
        trial=trial,
        target=lab.target,
        experiment=experiment,
        started_at=started_at,
        duration_ms=(time.monotonic() - started) * 1000,
        ctx=ctx,
        error=error,
    )
    _finish(bus, run_id, trial, record, checkpoint)
