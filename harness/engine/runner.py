"""The engine: plan a run, execute it trial by trial with a checkpoint each, write the bundle.

Python API (what `acklab run` and the repair flow use)::

    from acklab.harness.engine.runner import RunOptions, run
    result = run(RunOptions(target="fixture:unsafe", experiments=("lost-ack",)))
    result.exit_code, result.verdict, result.as_json()

Checkpoints. ``run.json`` is written first (status ``interrupted``) so that even a killed
run leaves a resumable bundle; every finished trial is written atomically as
``trials/<trial_id>.json``; incidents, the JUnit report, the final ``run.json`` and the
manifest are written when the last trial is done. On Ctrl-C or SIGTERM the trial in
progress is abandoned, ``run.json`` keeps status ``interrupted``, no manifest is written
(``acklab evidence verify`` calls the bundle incomplete) and the exit code is 6.
``--resume RUN_ID`` reruns only the trials without a file.
"""

from __future__ import annotations

import asyncio
import math
import secrets
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from types import MappingProxyType
from typing import Any

from acklab.evidence.bundle import BundleWriter
from acklab.evidence.clock import utcnow
from acklab.evidence.documents.run import RunDocument
from acklab.evidence.documents.trial import Trial
from acklab.evidence.errors import EvidenceError
from acklab.evidence.redaction import redact
from acklab.harness.core.bursts import check_burst_sync
from acklab.harness.core.plan import (
    RunPlan,
    RunSettings,
    Skipped,
    TrialPlan,
    event_ids,
    parse_shard,
    select,
    trial_id,
)
from acklab.harness.core.run_events import (
    Consumer,
    EventBus,
    ExperimentStarted,
    RunFinished,
    RunStarted,
)
from acklab.harness.engine import interrupts
from acklab.harness.engine.execute import execute_experiment
from acklab.harness.engine.late_read import reread, unreadable
from acklab.harness.engine.results import RunResult
from acklab.harness.engine.run_bundle import RunState, load_resume
from acklab.harness.errors import HarnessError, RunInterrupted, SpecError
from acklab.harness.experiments import EXPERIMENTS, Experiment, by_name
from acklab.harness.procs.confinement import Confinement, provide
from acklab.harness.procs.leases import leasing
from acklab.harness.specs.credentials import MIN_SECRET_CHARS, url_secrets
from acklab.harness.targets import Target, resolve_target
from acklab.harness.targets.templates import keeping
from acklab.harness.wire.providers import profile


@dataclass(frozen=True)
class RunOptions:
    """Everything `acklab run` takes."""

    target: str = "fixture:live"
    experiments: tuple[str, ...] = ()
    trials: int = 5
    seed: int | None = None
    db: str | None = None
    out: Path = Path("out")
    resume: str | None = None
    allow_remote: bool = False
    shard: str | None = None
    settings: RunSettings = field(default_factory=RunSettings)
    # Stop after this many seconds (finished trials kept, resumable, exit 6); None: no deadline.
    deadline_s: float | None = None
    journal: bool = True
    # Fixture targets: serve the fixture of this checkout in processes of its own (never imported),
    # confined by `confinement` (default: the installed sandbox; `unsandboxed`: the lab's own user),
    # on a schema the lab creates from the models of `schema_from` (default: the checkout).
    checkout: Path | None = None
    confinement: Confinement | None = field(default=None, repr=False)
    unsandboxed: bool = False
    schema_from: Path | None = None
    # What no written byte may contain, besides what the run derives itself (the signing
    # secret, the --db password in every spelling); kept out of repr so it is never logged.
    secrets: tuple[str, ...] = field(default=(), repr=False)
    # A named experiment that does not apply to the target is listed as skipped with its reason
    # instead of refused (exit 3): the Python API and the pytest plugin, where a test names
    # experiments and its report must say why one did not run.
    skip_inapplicable: bool = False
    # A spec's service the lab did not start may be served by a process outside the job
    # (harness.procs.listener): someone started it on purpose (another terminal, a container).
    allow_foreign_service: bool = False


def build_plan(
    target: Target,
    experiments: Sequence[Experiment],
    *,
    trials: int,
    seed: int,
    shard: tuple[int, int] | None,
    settings: RunSettings,
    salt_for: dict[str, str] | None = None,
    skipped: dict[str, str] | None = None,
) -> RunPlan:
    """The frozen plan: same target kind, experiments, trials, seed and shard -> same plan."""
    if trials < 1:
        raise SpecError(f"--trials: got {trials}; expected at least 1")
    prof = profile(target.scheme)
    everything: list[TrialPlan] = []
    for experiment in experiments:
        planned = experiment.planned(target, prof, settings)
        count = experiment.events(target) + experiment.calibration_events
        for index in range(trials):
            tid = trial_id(experiment.name, index)
            salt = (salt_for or {}).get(tid, "")
            ids, orders = event_ids(seed, experiment.name, index, count, salt, vary=target.varies)
            everything.append(TrialPlan(tid, experiment.name, index, ids, orders, planned, salt))
    listed = [Skipped(name, why) for name, why in (skipped or {}).items()]
    listed += [
        Skipped(e.name, why, variant)
        for e in experiments
        for variant, why in e.skipped_variants(target).items()
    ]
    return RunPlan(
        target=target.name,
        seed=seed,
        trials_per_experiment=trials,
        experiments=tuple(e.name for e in experiments),
        shard=shard,
        settings=settings,
        trials=select(everything, shard),
        skipped=tuple(listed),
    )


def choose_experiments(
    target: Target,
    names: Sequence[str],
    settings: RunSettings | None = None,
    *,
    strict: bool = True,
) -> tuple[list[Experiment], dict[str, str]]:
    """The experiments to run, and those that do not apply to `target` (name -> why).

    One named explicitly that does not apply is refused (exit 3) when `strict`: the user
    asked for it. An experiment whose needs the target cannot serve (`Target.unservable`)
    does not apply either.
    """
    settings = settings or RunSettings()
    chosen = by_name(names)

    def why_not(experiment: Experiment) -> str | None:
        return experiment.applicable(target) or target.unservable(experiment.needs(target, settings))

    skipped: dict[str, str] = {e.name: why for e in chosen if (why := why_not(e)) is not None}
    if strict and names and skipped:
        name, why = next(iter(skipped.items()))
        raise SpecError(f"--experiment {name}: {why}")
    # What the target's own spec says makes pointless (not what it cannot serve): skipped, even when named.
    skipped |= {e.name: why for e in chosen if e.name not in skipped and (why := e.skipped_for(target))}
    return [e for e in chosen if e.name not in skipped], skipped


def new_run_id(shard: tuple[int, int] | None) -> str:
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    suffix = f"-s{shard[0]}of{shard[1]}" if shard else ""
    return f"{stamp}-{secrets.token_hex(3)}{suffix}"


@dataclass(frozen=True)
class Prepared:
    """A run resolved and planned, nothing sent yet (`prepare`): what `run` executes."""

    target: Target
    experiments: tuple[Experiment, ...]
    plan: RunPlan
    run_id: str
    finished: Mapping[str, Trial]  # trials an earlier process finished (--resume)


def prepare(options: RunOptions, target: Target | None = None) -> Prepared:
    """Resolve target (unless given, e.g. an app served in-process), experiments and plan;
    nothing is sent (exit 3/5 errors surface here)."""
    if target is None:
        confinement = options.confinement
        if options.checkout is not None:
            # The evidence directory is closed to the served code's user and hidden from its namespace.
            options.out.mkdir(parents=True, exist_ok=True)
            options.out.chmod(0o700)
        if options.checkout is not None and confinement is None:
            confinement = provide(unsandboxed=options.unsandboxed, hide=(options.out.resolve(),))
        target = resolve_target(
            options.target,
            db_url=options.db,
            allow_remote=options.allow_remote,
            checkout=options.checkout,
            allow_foreign_service=options.allow_foreign_service,
            confinement=confinement,
            schema_from=options.schema_from,
        )
    # The handler's commit is read now, before the run writes anything into a checkout.
    _ = target.revision
    finished: dict[str, Trial] = {}
    carried: dict[str, str] = {}
    if options.resume:
        previous, finished = load_resume(options.out, options.resume, target)
        carried = {e.name: e.reason or "" for e in previous.experiments if e.verdict == "skipped"}
        names = tuple(e.name for e in previous.experiments if e.verdict != "skipped")
        options = replace(
            options,
            experiments=names,
            seed=previous.seed,
            trials=previous.trials_per_experiment or options.trials,
            shard=previous.shard,
        )
    experiments, skipped = choose_experiments(
        target, options.experiments, options.settings, strict=not options.skip_inapplicable
    )
    skipped = {**carried, **skipped}
    seed = options.seed if options.seed is not None else secrets.randbits(32)
    shard = parse_shard(options.shard)
    plan = build_plan(
        target,
        experiments,
        trials=options.trials,
        seed=seed,
        shard=shard,
        settings=options.settings,
        skipped=skipped,
    )
    if options.resume:
        # Unfinished trials get fresh event ids: their first try may have reached the database.
        salt = "resume-" + datetime.now(UTC).strftime("%Y%m%dT%H%M%S%f")
        todo = {t.trial_id: salt for t in plan.trials if t.trial_id not in finished}
        plan = build_plan(
            target,
            experiments,
            trials=options.trials,
            seed=seed,
            shard=shard,
            settings=options.settings,
            salt_for=todo,
            skipped=skipped,
        )
    run_id = options.resume or new_run_id(shard)
    return Prepared(target, tuple(experiments), plan, run_id, MappingProxyType(finished))


def run(
    options: RunOptions, consumers: Sequence[Consumer] = (), *, target: Target | None = None
) -> RunResult:
    """Run (or resume) a run to the end; raise RunInterrupted (exit 6) on Ctrl-C/SIGTERM.

    `target`: a target built by the caller (an app served in-process, `harness.engine.api`)
    instead of the one `options.target` names.
    """
    resumable = target is None
    deadline = options.deadline_s
    if deadline is not None and not (
        isinstance(deadline, int | float) and math.isfinite(deadline) and deadline > 0
    ):
        # NaN passes every comparison's range check and would end the run at once (exit 6).
        raise SpecError(f"deadline_s: got {deadline!r}; give a finite number of seconds above 0, e.g. 600")
    prepared = prepare(options, target)
    refused = _secrets(prepared.target, options)
    # Whatever the run starts (fixture processes, proxies, temporary databases) is leased in the journal;
    # a setup's template lives as long as the run, or the pytest session or flow the run is part of.
    with leasing(options.out if options.journal else None, prepared.run_id, secrets=refused), keeping():
        return asyncio.run(_whole(options, prepared, consumers, refused=refused, resumable=resumable))


async def _whole(
    options: RunOptions,
    prepared: Prepared,
    consumers: Sequence[Consumer],
    *,
    refused: list[str],
    resumable: bool,
) -> RunResult:
    """The run and the target's release, in one event loop: what the target started in it (a
    server's tasks, a transport's connections) is closed in the loop it belongs to."""
    try:
        return await _main(
            options,
            target=prepared.target,
            experiments=list(prepared.experiments),
            plan=prepared.plan,
            run_id=prepared.run_id,
            finished=dict(prepared.finished),
            consumers=consumers,
            refused=refused,
            resumable=resumable,
        )
    finally:
        await prepared.target.aclose()


def _secrets(target: Target, options: RunOptions) -> list[str]:
    """What the bundle writer and the journal refuse: the target's credentials (signing secret,
    database passwords in every spelling), the --db password, and the caller's own secrets."""
    extra = {s for s in options.secrets if len(s) >= MIN_SECRET_CHARS}
    return sorted(target.credentials() | url_secrets(options.db) | extra)


async def _main(
    options: RunOptions,
    *,
    target: Target,
    experiments: list[Experiment],
    plan: RunPlan,
    run_id: str,
    finished: dict[str, Trial],
    consumers: Sequence[Consumer],
    refused: list[str],
    resumable: bool = True,
) -> RunResult:
    # The deadline bounds everything from here, the preflight and the user's callables included.
    interrupted = interrupts.install(options.deadline_s)
    await _check_target(options, target, experiments, plan, interrupted)  # takes them off if it raises
    try:
        bus = _bus(options, consumers, refused)
        writer = BundleWriter(options.out / run_id, kind="run", secrets=refused)
        skipped = {s.name: s.reason for s in plan.skipped if s.variant is None}
        state = RunState(run_id, plan, target, experiments, writer, bus, utcnow(), dict(finished), skipped)
        if not options.resume:
            state.preliminary()
        bus.emit(
            RunStarted(
                run_id,
                target.name,
                plan.experiments,
                len(plan.trials),
                sum(t.trial_id in finished for t in plan.trials),
                str(writer.root),
                state.started_at,
            )
        )
    except BaseException:  # e.g. the bundle's folder not writable: the caller's handlers come back
        interrupts.cancel(interrupted)
        raise
    run_doc: RunDocument | None = None
    try:
        sockets, parameters = await _run_experiments(target, experiments, plan, state)
        # Late effects: every event of the run is read again, before any service of the run is
        # stopped — those of trials an interrupted process finished too, when their store
        # outlived it; when it did not (a temporary database), those trials are errors.
        every = [state.finished[t.trial_id] for t in plan.trials if t.trial_id in state.finished]
        earlier = [r for r in every if r.trial_id in finished]
        lost = earlier if target.ephemeral_effects else []
        gone = {r.trial_id for r in lost}
        again = await reread(target, [r for r in every if r.trial_id not in gone])
        for record in [*again, *(unreadable(r) for r in lost if r.deliveries)]:
            state.checkpoint(record)
        interrupts.raise_if_interrupted(interrupted)  # before the bundle says complete
        run_doc = state.finish(sockets, parameters)
        interrupts.raise_if_interrupted(interrupted)  # one that came while it was written (no await there)
    except asyncio.CancelledError:
        if not interrupted.is_set():
            raise
        interrupted.honoured = True
        if run_doc is not None:
            raise _completed_when_stopped(options, state, interrupted, run_doc) from None
        raise _interrupted(options, state, interrupted, resumable=resumable) from None
    finally:
        interrupts.cancel(interrupted)
    _close_complete(state, run_doc)
    return RunResult.of(run_doc, writer.root)


def _close_complete(state: RunState, run_doc: RunDocument) -> None:
    """The run's bundle is complete: its events end with that (the journal records it), and stop."""
    state.bus.emit(
        RunFinished(
            state.run_id,
            state.target.name,
            run_doc.verdict,
            "complete",
            state.started_at,
            run_doc.ended_at,
            str(state.writer.root),
            run_doc,
        )
    )
    state.bus.close()


async def _check_target(
    options: RunOptions,
    target: Target,
    experiments: list[Experiment],
    plan: RunPlan,
    interrupted: interrupts.RunSignals,
) -> None:
    """Before a bundle exists: an unreachable target or database (exit 4), a single-packet burst
    against a target without HTTP/2 (exit 3)."""
    try:
        await target.preflight()
        for notice in target.notices:
            print(f"acklab: warning: {redact(notice)}", file=sys.stderr)
        if any(e.bursts for e in experiments):
            await check_burst_sync(target, plan.settings.burst_sync)
    except BaseException as exc:
        # The run ends here: its handlers go (a signal that stopped it is not passed on again).
        stopped = isinstance(exc, asyncio.CancelledError) and interrupted.is_set()
        interrupted.honoured = interrupted.honoured or stopped
        interrupts.cancel(interrupted)
        if not stopped:
            raise
        raise RunInterrupted(
            f"{_stopped(options, interrupted, target)} before the first trial (while checking the target); "
            "nothing was written: run it again",
            deadline=interrupted.deadline,
        ) from None


def _bus(options: RunOptions, consumers: Sequence[Consumer], refused: list[str]) -> EventBus:
    """The run's events, to `consumers` and (unless asked not to) to the journal."""
    bus = EventBus(consumers)
    if options.journal:
        try:
            from acklab.harness.engine.journal_sink import JournalSink

            bus.add(JournalSink(options.out, secrets=refused))
        except (ImportError, EvidenceError) as exc:
            print(f"acklab: journal unavailable ({exc}); the bundle is still written", file=sys.stderr)
    return bus


async def _run_experiments(
    target: Target, experiments: list[Experiment], plan: RunPlan, state: RunState
) -> tuple[dict[str, bool], dict[str, dict[str, Any]]]:
    """Every experiment's unfinished trials; (whether each ran over a socket, its parameters)."""
    sockets: dict[str, bool] = {}
    parameters: dict[str, dict[str, Any]] = {}
    for experiment in experiments:
        todo = [
            t for t in plan.trials if t.experiment == experiment.name and t.trial_id not in state.finished
        ]
        total = sum(t.experiment == experiment.name for t in plan.trials)
        if not total:
            continue
        state.bus.emit(ExperimentStarted(state.run_id, experiment.name, total, total - len(todo)))
        needs = experiment.needs(target, plan.settings)
        sockets[experiment.name] = needs.socket or target.socket_only
        parameters[experiment.name] = {**plan.settings.as_dict(), "needs_socket": needs.socket}
        await execute_experiment(
            experiment,
            target=target,
            plan=plan,
            todo=todo,
            run_id=state.run_id,
            bus=state.bus,
            checkpoint=state.checkpoint,
        )
    return sockets, parameters


def _interrupted(
    options: RunOptions, state: RunState, interrupted: interrupts.RunSignals, *, resumable: bool
) -> RunInterrupted:
    """What an interrupted run says (exit 6), once its finished trials and the target's files are kept."""
    target, writer = state.target, state.writer
    try:
        state.keep_attachments()  # the service stops with this process; its output stays
    except (OSError, EvidenceError) as exc:
        print(f"acklab: the target's files could not be kept ({exc})", file=sys.stderr)
    state.bus.emit(
        RunFinished(
            state.run_id, target.name, "error", "interrupted", state.started_at, utcnow(), str(writer.root)
        )
    )
    state.bus.close()
    why = _stopped(options, interrupted, target)
    how = (
        f"resume with: acklab run --resume {state.run_id} --out {options.out} --target {options.target}"
        if resumable
        else "run it again"
    )
    return RunInterrupted(
        f"{why}: {len(state.finished)} of {len(state.plan.trials)} trials are finished and kept in "
        f"{writer.root}; " + how,
        deadline=interrupted.deadline,
    )


def _completed_when_stopped(
    options: RunOptions, state: RunState, interrupted: interrupts.RunSignals, run_doc: RunDocument
) -> RunInterrupted:
    """What a run stopped while it wrote its last files says (exit 6: it was asked to stop): its
    bundle was finished all the same, so there is nothing to resume, and the journal says complete."""
    _close_complete(state, run_doc)
    return RunInterrupted(
        f"{_stopped(options, interrupted, state.target)} as the run wrote its last files: its bundle "
        f"{state.writer.root} was finished all the same (verdict {run_doc.verdict}, "
        f"{len(state.finished)} of {len(state.plan.trials)} trials); nothing to resume",
        deadline=interrupted.deadline,
    )


def _stopped(options: RunOptions, interrupted: interrupts.RunSignals, target: Target) -> str:
    """Why the run stopped: its deadline (naming the user's code it waited on, abandoned), or a signal."""
    if not interrupted.deadline:
        return "interrupted"
    waiting = target.waiting_on()
    abandoned = f" while waiting on {waiting}: abandoned in its thread" if waiting else ""
    return f"the run reached its --deadline of {options.deadline_s:g} s{abandoned}"


__all__ = [
    "EXPERIMENTS",
    "HarnessError",
    "Prepared",
    "RunOptions",
    "RunResult",
    "build_plan",
    "prepare",
    "run",
]
