"""``acklab explore`` and ``acklab replay``: the schedule explorer's commands and its evidence.

Both write a bundle (``run.json``, the failing trial, an incident carrying ``schedule``, a
manifest) under ``--out``, and exit 1 when the handler broke an invariant, 0 when not,
4 when the lab itself failed.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import click

from acklab.evidence.clock import utcnow
from acklab.evidence.exitcodes import ExitCode
from acklab.harness.core.plan import BURST_SYNCS, RunSettings
from acklab.harness.engine.runner import new_run_id
from acklab.harness.errors import SpecError
from acklab.harness.explore.bundle import write_bundle
from acklab.harness.explore.explorer import (
    Failure,
    LabSession,
    explore_target,
    load_incident,
    new_seed,
    replay_schedule,
)
from acklab.harness.explore.schedules import Step
from acklab.harness.procs.leases import leasing
from acklab.harness.targets import Target, resolve_target

CONTEXT = {"help_option_names": ["-h", "--help"]}


def _say(message: str) -> None:
    click.echo(message, err=True)


def _report(
    what: str,
    *,
    target: Target,
    failure: Failure | None,
    bundle: Path,
    incident: str | None,
    extra: dict[str, Any],
) -> dict[str, Any]:
    steps = [s.record() for s in failure.runner.steps] if failure and failure.violations else []
    violations = failure.violations if failure else []
    if violations:
        _say(f"acklab {what}: {target.name} broke an invariant; the schedule ({len(steps)} steps):")
        for n, step in enumerate(failure.runner.steps if failure else [], 1):
            _say(f"  {n}. {step}")
        for v in violations:
            _say(f"  violated {v.invariant} on {v.event_id}: {v.detail}")
    elif what == "explore":
        tried = f"{extra['examples']} schedule(s) of a budget of {extra['budget']}, seed {extra['seed']}"
        _say(f"acklab explore: {target.name}: no invariant broken in {tried}")
    else:
        _say(f"acklab {what}: {target.name}: no invariant broken")
    incident_path = str(bundle / incident) if incident else None
    if violations and incident_path:
        _say(f"  incident: {incident_path}\n  replay:   acklab replay {incident_path}")
    # passing or not, where the evidence is (acklab evidence verify / console read it)
    _say(f"  bundle:   {bundle.resolve()}")
    return {
        "verdict": "fail" if violations else "pass",
        "target": target.name,
        "schedule": steps,
        "violations": [v.dump() for v in violations],
        "incident": incident_path,
        "bundle": str(bundle.resolve()),
        **extra,
    }


def _common(command: Any) -> Any:
    for option in reversed(
        [
            click.option("--db", default=None, metavar="URL", help="Fixture targets: database URL."),
            click.option(
                "--out",
                type=click.Path(file_okay=False, path_type=Path),
                default=Path("out"),
                show_default=True,
            ),
            click.option(
                "--json", "as_json", is_flag=True, help="Print the result as one JSON object on stdout."
            ),
            click.option(
                "--allow-remote", is_flag=True, help="Allow a target endpoint off the loopback range."
            ),
            click.option(
                "--burst-sync",
                type=click.Choice(BURST_SYNCS),
                default=None,
                help="How a burst step is released (as `acklab run --burst-sync`).  [default: last-byte; "
                "replay: the incident's]",
            ),
        ]
    ):
        command = option(command)
    return command


@click.command("explore", context_settings=CONTEXT)
@click.option(
    "--target", default="fixture:live", show_default=True, help="fixture:live, fixture:unsafe or a spec file."
)
@click.option(
    "--budget",
    type=click.IntRange(min=1),
    default=100,
    show_default=True,
    help="Examples (schedules) to try.",
)
@click.option("--seed", type=int, default=None, help="Hypothesis seed; default: random, recorded.")
@_common
def explore(
    *,
    target: str,
    budget: int,
    seed: int | None,
    db: str | None,
    out: Path,
    as_json: bool,
    allow_remote: bool,
    burst_sync: str | None,
) -> int:
    """Search delivery schedules for one that breaks an invariant; shrink it; write it replayable."""
    resolved = resolve_target(target, db_url=db, allow_remote=allow_remote)
    _ = resolved.revision  # the handler's commit, read before anything is written
    seed = new_seed() if seed is None else seed
    started_at, started = utcnow(), time.monotonic()
    run_id = new_run_id(None) + "-explore"
    settings = RunSettings(burst_sync=burst_sync or RunSettings.burst_sync)
    with leasing(out, run_id, secrets=sorted(resolved.credentials())):
        try:
            with LabSession(resolved, seed, settings=settings) as session:
                found = explore_target(session, budget)
        finally:
            _aclose(resolved)
    failure = found.failure if found.failure and found.failure.violations else None
    bundle, incident = write_bundle(
        out,
        run_id=run_id,
        target=resolved,
        target_ref=target,
        seed=seed,
        started_at=started_at,
        failure=failure,
        parameters={
            "budget": budget,
            "examples_run": found.examples,
            "flaky": found.flaky,
            "burst_sync": settings.burst_sync,
        },
        duration_ms=(time.monotonic() - started) * 1000,
    )
    extra = {
        "run_id": run_id,
        "examples": found.examples,
        "budget": budget,
        "seed": seed,
        "flaky": found.flaky,
    }
    result = _report(
        "explore",
        target=resolved,
        failure=failure,
        bundle=bundle,
        incident=incident if failure else None,
        extra=extra,
    )
    if as_json:
        click.echo(json.dumps(result))
    return int(ExitCode.VERDICT_FAILED if failure else ExitCode.OK)


@click.command("replay", context_settings=CONTEXT)
@click.argument("incident_file", metavar="INCIDENT", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--target", default=None, help="Replay against another target (default: the incident's).")
@_common
def replay(
    *,
    incident_file: Path,
    target: str | None,
    db: str | None,
    out: Path,
    as_json: bool,
    allow_remote: bool,
    burst_sync: str | None,
) -> int:
    """Re-run exactly the schedule an `acklab explore` incident recorded (fresh event ids)."""
    doc = load_incident(incident_file)
    schedule = [Step.from_record(step) for step in doc.schedule or []]
    ref = target or doc.experiment.parameters.get("target_ref")
    if not ref:
        raise SpecError(f"INCIDENT: {incident_file} does not name its target; pass --target")
    resolved = resolve_target(ref, db_url=db, allow_remote=allow_remote)
    _ = resolved.revision  # the handler's commit, read before anything is written
    seed = doc.seed
    started_at, started = utcnow(), time.monotonic()
    recorded = doc.experiment.parameters.get("burst_sync")
    settings = RunSettings(burst_sync=burst_sync or recorded or RunSettings.burst_sync)
    salt = f"replay-{time.time_ns()}"  # fresh ids: the incident's database may still hold the first run's
    run_id = new_run_id(None) + "-replay"
    with leasing(out, run_id, secrets=sorted(resolved.credentials())):
        try:
            with LabSession(resolved, seed, salt=salt, settings=settings) as session:
                failure = replay_schedule(session, schedule)
        finally:
            _aclose(resolved)
    bundle, incident = write_bundle(
        out,
        run_id=run_id,
        target=resolved,
        target_ref=ref,
        seed=seed,
        started_at=started_at,
        failure=failure,
        parameters={"replay_of": doc.incident_id, "burst_sync": settings.burst_sync},
        duration_ms=(time.monotonic() - started) * 1000,
    )
    extra = {"run_id": run_id, "replay_of": doc.incident_id}
    result = _report(
        "replay", target=resolved, failure=failure, bundle=bundle, incident=incident, extra=extra
    )
    if as_json:
        click.echo(json.dumps(result))
    return int(ExitCode.VERDICT_FAILED if failure.violations else ExitCode.OK)


def _aclose(target: Target) -> None:
    import asyncio

    try:
        asyncio.run(target.aclose())
    except RuntimeError as exc:  # pragma: no cover - aclose from a running loop is a lab bug
        print(f"acklab: could not clean up the target: {exc}", file=sys.stderr)
