"""What every checkpoint of a flow run may use: its configuration, its trail, the lab, the console.

`FlowContext` never changes while the flow runs; what the flow learns travels in the stage
values of `flows.state`. The trail is where checkpoints record themselves, and the only
thing they write to.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from acklab.evidence.documents.trail import CheckpointName

from .approvals import DecisionSource
from .errors import FlowError, GateRefused
from .escape import visible
from .lab import LabRun, run_lab
from .proposers import ProposalRequest, Proposer
from .publish import Publisher
from .sandbox import Sandbox, choose
from .spec import FlowSpec
from .state import Reproduced
from .trail import Trail
from .worktree import Worktree

if TYPE_CHECKING:
    from acklab.harness.specs.target import TargetSpec


def _stderr(message: str) -> None:
    sys.stderr.write(f"flow: {message}\n")
    sys.stderr.flush()


@dataclass
class FlowConfig:
    """What one flow run needs; the CLI builds it from flags, tests build it directly."""

    repo: Path
    spec: FlowSpec
    out: Path
    proposer: Proposer
    decisions: DecisionSource
    publisher: Publisher
    secrets: list[str] = field(default_factory=list)
    echo: Callable[[str], None] = _stderr
    propose_only: bool = False
    # Run the code under repair as the lab's own user when no sandbox is possible (said everywhere).
    unsandboxed: bool = False
    # The fixture flow's PostgreSQL server (--db); a target spec names its own database.
    db: str | None = None
    # The commit to repair when it is not the checkout's HEAD (a Duo flow's workload is cloned
    # at a ref of its own; the merge request's head is fetched and named here).
    expected_head: str | None = None


@dataclass(frozen=True)
class FlowContext:
    """One flow run's configuration and trail, and the handler file its scope names."""

    config: FlowConfig
    trail: Trail
    handler: str
    sandbox: Sandbox

    @classmethod
    def of(cls, config: FlowConfig, trail: Trail) -> FlowContext:
        """The context of one run; SandboxUnavailable (exit 5) when the code under repair could not be
        confined here and the flow was not told --unsandboxed."""
        scoped = config.spec.scoped_files()
        if not scoped:
            raise FlowError(f"{config.spec.path}: the scope allows no single file a proposal could target")
        # The evidence is closed to the sandbox user (0700) and hidden from its namespace.
        config.out.mkdir(parents=True, exist_ok=True)
        config.out.chmod(0o700)
        sandbox = choose(unsandboxed=config.unsandboxed, hide=(config.out.resolve(),))
        trail.sandboxed(sandbox.name, sandbox.describe())
        if sandbox.unsandboxed:
            config.echo(f"WARNING: {sandbox.describe()}")
        return cls(config, trail, scoped[0], sandbox)

    @property
    def spec(self) -> FlowSpec:
        return self.config.spec

    def say(self, message: str) -> None:
        # Progress lines quote proposals, guard reasons, actors: no control character reaches a terminal.
        self.config.echo(visible(message))

    def attempt(self, name: CheckpointName) -> int:
        """The attempt number of checkpoint `name` about to run (1 the first time)."""
        return self.trail.attempts(name) + 1

    def lab(
        self,
        checkout: Worktree,
        experiments: Sequence[str],
        why: str,
        *,
        schema_from: Worktree | None = None,
        seed: int | None = None,
        skip_inapplicable: bool = False,
    ) -> LabRun:
        """Attack `checkout` with `experiments`, served in the sandbox on the schema of `schema_from`'s
        models (the expected head; default `checkout`), with the spec's seed or `seed` (FlowError,
        exit 4, when the lab could not judge them; `skip_inapplicable`: one that does not apply to the
        target is listed as skipped, not refused)."""
        spec = self.spec
        seed = spec.seed if seed is None else seed
        self.say(f"{why}: {', '.join(experiments)} x{spec.trials} (seed {seed}) on {checkout.path} ...")
        try:
            run = self._run_lab(checkout, experiments, schema_from, seed, skip_inapplicable)
        except FlowError as exc:
            hint = unpassed_hint(spec.target, checkout.path, str(exc))
            if not hint or isinstance(exc, GateRefused):
                raise
            raise type(exc)(f"{exc}{hint}") from exc
        for exp in run.experiments.values():
            self.say(f"  {exp.line()}")
        if run.errored() or not run.experiments:
            problems = [run.experiments[n].line() for n in run.errored()]
            if run.error:
                problems.append(run.error)
            log = _service_log(run.bundle)
            hint = unpassed_hint(spec.target, checkout.path, "\n".join([*problems, log]))
            raise FlowError(
                f"the lab could not run ({why}): {'; '.join(problems) or 'no experiments ran'}{hint}"
            )
        return run

    def _run_lab(
        self,
        checkout: Worktree,
        experiments: Sequence[str],
        schema_from: Worktree | None,
        seed: int,
        skip_inapplicable: bool,
    ) -> LabRun:
        spec = self.spec
        return run_lab(
            checkout.path,
            target=spec.target,
            experiments=list(experiments),
            trials=spec.trials,
            seed=seed,
            out=self.config.out,
            sandbox=self.sandbox,
            schema_from=(schema_from or checkout).path,
            secrets=self.config.secrets,
            db=self.config.db,
            handler=self.handler,
            skip_inapplicable=skip_inapplicable,
        )

    def skip_rest(self, after: CheckpointName, why: str) -> None:
        """Record every checkpoint after `after` as skipped, with why."""
        names = list(self.spec.checkpoints)
        for name in names[names.index(after) + 1 :]:
            self.trail.skipped(name, why)  # type: ignore[arg-type]  # the spec's checkpoint names

    def request(self, state: Reproduced, feedback: str | None) -> ProposalRequest:
        """What a proposer is told about the failure it is to repair."""
        return ProposalRequest(
            handler_path=self.handler,
            handler_source=state.source,
            incident_summary=state.incident,
            failing_experiments=state.failing,
            scope=self.spec.scope,
            limits=self.spec.limits,
            feedback=feedback,
            target_brief=target_brief(self.spec.target, state.head.path),
            imports=self.spec.imports,
        )


# How much of a run's service.log is read for the variables it names (its tail: where it failed).
SERVICE_LOG_TAIL = 256 * 1024


def _service_log(bundle: str | None) -> str:
    if bundle is None:
        return ""
    path = Path(bundle) / "service.log"
    try:
        with path.open("rb") as log:
            log.seek(max(0, path.stat().st_size - SERVICE_LOG_TAIL))
            return log.read(SERVICE_LOG_TAIL).decode("utf-8", errors="replace")
    except OSError:
        return ""


def unpassed_hint(target: str, checkout: Path, text: str) -> str:
    """When the lab could not run a user's service: the variables its output (`text`) names that are
    set here but were not passed to it in the sandbox, and how to pass them ('' when there are none)."""
    if target.startswith("fixture:"):
        return ""
    from acklab.harness.specs.credentials import shared_names

    from .sandbox.environment import unpassed

    spec = _spec(checkout / target)
    if spec is None:
        return ""
    env = spec.command.env if spec.command is not None else {}
    names = unpassed(text, [*env, *shared_names(spec.dump())])
    if not names:
        return ""
    listed = ", ".join(names)
    adds = ", ".join(f"{name}: env:{name}" for name in names)
    return (
        f"; the service's output names {listed}, set in the lab's environment but not passed to the "
        "sandboxed service, which gets only its command.env (and the variables its spec's signing and "
        f"headers read): add {adds} under command.env in {target}"
    )


def _spec(path: Path) -> TargetSpec | None:
    """The target spec file at `path`, read as the lab reads it (None when it cannot be read)."""
    from acklab.harness.errors import HarnessError
    from acklab.harness.specs.target import load_target_spec

    try:
        return load_target_spec(path)
    except (OSError, HarnessError):
        return None


def target_brief(target: str, head: Path) -> str:
    """What a proposer is told of the target: how effects are counted and what is expected (the
    spec file's effects: and expect: at the expected head; the fixture's own for fixture targets)."""
    if target.startswith("fixture:"):
        from acklab.harness.targets.checkout import FIXTURE_EFFECTS_SQL

        return f"effects: sql count {FIXTURE_EFFECTS_SQL!r}\nexpect: {{max_effects: 1, conflict_status: [409, 422]}}"
    import yaml

    spec = _spec(head / target)
    if spec is None:
        return ""
    return yaml.safe_dump(spec.excerpt("event", "conflict", "effects", "expect"), sort_keys=False, width=100)
