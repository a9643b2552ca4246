"""The Python API's entry points (exported as ``acklab.run`` and ``acklab.attack``).

* `run`: what ``acklab run`` does, from Python: a built-in fixture or a target spec file.
* `attack`: a user's ASGI or WSGI app object, served by the lab in this process
  (`harness.targets.app`), described as a target spec allows (`harness.targets.app_spec`).

Both write the run's bundle like every run (``out/<run_id>/``, verifiable with ``acklab
evidence verify``, shown by ``acklab console``) and return a `RunResult`. Input the lab
cannot use raises an `AcklabError` naming the value and the fix (exit code 3 or 5 on it);
a handler that breaks an invariant is never an exception: it is ``result.passed is
False``. Ctrl-C stops a run as `KeyboardInterrupt` (its finished trials are kept).
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar, Unpack

from acklab.harness.core import self_check
from acklab.harness.core.plan import MAX_TRIALS, RunSettings
from acklab.harness.engine.options import AttackOptions, RunKeywords, app_target_of, check_keywords
from acklab.harness.engine.results import RunResult
from acklab.harness.engine.runner import RunOptions
from acklab.harness.engine.runner import run as run_options
from acklab.harness.errors import RunInterrupted, SpecError

# A test suite runs often: fewer trials than `acklab run`'s five (each still proves its fault).
ATTACK_TRIALS = 3

T = TypeVar("T")


def _outside_a_loop(work: Callable[[], T]) -> T:
    """`work()`, in a thread of its own when this thread already runs an event loop (an async test)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        looping = False
    else:
        looping = True
    if not looping:  # (not called in the except block: its error would chain onto every one of work's)
        return work()
    with ThreadPoolExecutor(1, thread_name_prefix="acklab-run") as pool:
        return pool.submit(work).result()


def _interruptible(work: Callable[[], RunResult]) -> RunResult:
    try:
        return _outside_a_loop(work)
    except RunInterrupted as exc:
        if exc.deadline:
            raise
        # Ctrl-C means "stop" to a Python caller (pytest ends the session on it), not "next test".
        raise KeyboardInterrupt(str(exc)) from exc


def _names(experiments: str | Sequence[str]) -> tuple[str, ...]:
    return (experiments,) if isinstance(experiments, str) else tuple(experiments)


def run(
    target: str | os.PathLike[str] | RunOptions = "fixture:live", **options: Unpack[RunKeywords]
) -> RunResult:
    """Run the lab against `target` and return its result (``acklab run`` from Python).

    `target`: ``fixture:live``, ``fixture:unsafe``, the path of a target spec file, or a
    whole `RunOptions`. `options` are `RunOptions` fields (`RunKeywords`), e.g.
    ``experiments=("lost-ack",)``, ``trials=3``, ``seed=1``, ``out="out"``,
    ``settings=RunSettings(burst=32)``. Unlike ``acklab run``, an experiment named that does
    not apply to the target is listed as skipped with its reason rather than refused.
    """
    base = target if isinstance(target, RunOptions) else RunOptions(target=os.fspath(target))
    given: dict[str, Any] = dict(options)
    if "experiments" in options:
        given["experiments"] = _names(options["experiments"])
    if "out" in options:
        given["out"] = Path(options["out"])
    try:
        chosen = dataclasses.replace(base, **{"skip_inapplicable": True, **given})
    except TypeError as exc:
        fields = ", ".join(f.name for f in dataclasses.fields(RunOptions) if f.name != "target")
        raise TypeError(f"acklab.run(): {exc}; the options are: {fields}") from None
    return _interruptible(lambda: run_options(chosen))


def attack(app: Any, **options: Unpack[AttackOptions]) -> RunResult:
    """Attack an ASGI app (FastAPI, Starlette) or a WSGI app (Flask, Django) inside this process.

    The target is described as a target spec allows (`TargetFields`) — `spec` (a file, a dict or a
    `TargetSpec`), then any of the keyword fields of a spec over it: `endpoint` (a path such as
    ``"/webhooks"``), `signing` (a scheme, or ``{"scheme", "secret"}``) with `secret`, `event`
    (the body template), `conflict`, `expect`, `headers`, `delivery`, `name`. `effects` counts
    one event's side effects: a callable ``event_id -> int`` (sync or async; your own ORM session)
    or a spec's ``effects`` (``sql``, or ``http`` with a path of this app); `state` (a callable)
    reads its committed state, for ``expect.conflict: ignore``.

    Beyond one event (docs/beyond-one-event.md): `lifecycle` (``{"object": ..., "events": [...]}``),
    `siblings` (``[{"type": ...}]``) and `competitor` (``{"method", "url", "body"}``, the url a
    path of this app) are the spec's sections. Callables that take an ``object_id`` keyword
    (``effects=lambda event_id, object_id: ...``, ``state=...``) are given the event's object:
    out-of-order reads the object's state, race-with-request counts the object's effects.

    How the attack runs (`AttackOptions`): `experiments`, `trials` (default 3), `seed`, `out`
    (default ``out``), `settings`, `deadline_s`, `journal`, `consumers`. Deliveries reach the
    app in-process; an experiment that needs a real connection (lost-ack-reset, timeout-overlap,
    concurrent-duplicates) gets the app served by uvicorn on loopback in this process
    (``serving="auto"``), or is skipped with its reason (``serving="in-process"``);
    ``serving="socket"`` serves every experiment that way. Experiments that cannot run on an
    app in this process (the crash experiments, the database-link faults) are listed as skipped
    with why. `interface`: ``auto``, ``asgi`` or ``wsgi``. `lifespan`: run the app's startup and
    shutdown around each experiment. `placeholders`: the values of a spec's run placeholders
    (``{"scratch": ..., "port": ...}``; ``webhook_lab.placeholders`` allocates them for a test).
    `sinks`: started SMTP / outbound sinks (`acklab.Sinks`, ``webhook_lab.sinks(...)``) the app
    sends to; their emails and calls are counted beside the rows (``expect.max_emails``,
    ``max_calls``). `where`: the folder the handler's code is taken from (default: here).
    """
    check_keywords(options, AttackOptions, "acklab.attack()")
    trials = options.get("trials", ATTACK_TRIALS)
    if isinstance(trials, bool) or not isinstance(trials, int) or not 1 <= trials <= MAX_TRIALS:
        raise SpecError(f"trials: got {trials!r}; expected a whole number from 1 to {MAX_TRIALS}")
    target = app_target_of(
        app,
        options,
        serving=options.get("serving", "auto"),
        allow_remote=options.get("allow_remote", False),
        default_name="app",
    )
    target.sinks = options.get("sinks")
    run_with = RunOptions(
        target=target.name,
        experiments=_names(options.get("experiments", ())),
        trials=trials,
        seed=options.get("seed"),
        out=Path(options.get("out", "out")),
        settings=options.get("settings") or RunSettings(),
        deadline_s=options.get("deadline_s"),
        journal=options.get("journal", True),
        skip_inapplicable=True,
    )
    consumers = options.get("consumers", ())
    # The app runs in this process: the verdict code checks itself before (an earlier app of the
    # process) and after (this one) the attack (harness.core.self_check).
    self_check.check("before this attack: an earlier in-process app or test")
    try:
        result = _interruptible(lambda: run_options(run_with, consumers, target=target))
    finally:
        if target.close is not None:  # the run stopped before it released the app (bad options)
            target.close()
    self_check.check(f"during the attack of {target.name}; its bundle {result.bundle} is not evidence")
    return result
