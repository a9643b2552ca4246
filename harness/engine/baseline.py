"""``acklab run --baseline REF``: the working tree and REF attacked with one plan, one comparison.

Before and after your own fix, without the ceremony (commit, reuse a seed, wipe the database):
the lab checks REF out in a leased worktree (`harness.procs.worktrees`), serves it the way the
target says, attacks it and the working tree with the same experiments, trials and seed, and
bundles both runs as one comparison (`harness.engine.comparison`), whose Compare page names both
revisions.

* A target spec: the working tree's spec (the attack stays one plan) is placed in the worktree
  at the same path and served from it as ``--checkout`` serves a spec (`served_spec`): REF's
  ``setup:`` and ``command:`` run confined in a private copy of the worktree (the sandbox's user,
  network namespace and allowlisted environment: none of the lab's credentials, not its
  evidence), with a ``{{port}}`` of their own; its effects must live in a store made per run
  (``{{scratch}}`` or ``{{database_url}}``), or both revisions would count in one database.
* The built-in fixture: REF's fixture is served from the worktree by processes of its own
  (``--checkout``); the working tree's is this checkout's.

The working tree's own service is the user's code, started as they would: unconfined, but with
the lab's environment stripped of its credentials (`harness.procs.confinement.unconfined_env`).

The exit code is the working tree's; a baseline the lab could not judge makes a passing run
exit 4 (as ``--compare-with``).
"""

from __future__ import annotations

import secrets
import shutil
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

from acklab.evidence.clock import utcnow
from acklab.harness.core.run_events import Consumer
from acklab.harness.engine.comparison import ComparisonResult, bundle_comparison, check_options
from acklab.harness.engine.runner import RunOptions, run
from acklab.harness.errors import SpecError, UsageError
from acklab.harness.procs.confinement import provide
from acklab.harness.procs.worktrees import leased_worktree, resolve_commit, toplevel
from acklab.harness.targets import Target, resolve_target
from acklab.harness.targets.provenance import Revision

PER_RUN_STORES = ("{{scratch}}", "{{database_url}}")


def _usage(message: str) -> UsageError:
    return UsageError(message)


def _repository(options: RunOptions) -> Path:
    """The checkout whose history REF is looked up in: the spec's, or (fixture) the lab's."""
    if options.target.startswith("fixture:"):
        # The checkout this module lives in (harness/engine/ of a clone); an installed wheel has none.
        root = Path(__file__).resolve().parents[2]
        if not all(
            (root / m).is_file() for m in ("pyproject.toml", "harness/__init__.py", "app/webhooks.py")
        ):
            raise _usage(
                "--baseline with a fixture target needs acklab run from a checkout of acklab (git clone); "
                "an installed package has no history to check REF out from"
            )
        found = toplevel(root)
    else:
        found = toplevel(Path(options.target).resolve().parent)
    if found is None:
        where = (
            "the acklab checkout" if options.target.startswith("fixture:") else f"{options.target}'s folder"
        )
        raise _usage(f"--baseline: {where} is not inside a git repository; commit your service first")
    return found


def _check_spec(spec: Path) -> None:
    text = spec.read_text(encoding="utf-8", errors="replace")
    if "command:" not in text:
        raise SpecError(
            f"--baseline: {spec} has no command:, so the lab would attack the same running service twice; "
            "add command: (the lab then serves each revision itself, on {{port}})"
        )
    if "sql:" in text and not any(p in text for p in PER_RUN_STORES):
        raise SpecError(
            f"--baseline: {spec} counts effects in a fixed database, so both revisions would write and be "
            "counted in one store; put the service's database in {{scratch}} (sqlite:///{{scratch}}/x.db) "
            "or use {{database_url}} (docs/placeholders.md)"
        )


def _baseline_target(options: RunOptions, repo: Path, worktree: Path, commit: str) -> Target:
    """The target as REF serves it, confined like any checkout, with REF's commit pinned as its revision."""
    # REF's code is served from its worktree as --checkout serves one: in the sandbox (its own user,
    # network and copy), counted on a pinned schema, the evidence closed to it.
    options.out.mkdir(parents=True, exist_ok=True)
    options.out.chmod(0o700)
    confinement = options.confinement or provide(
        unsandboxed=options.unsandboxed, hide=(options.out.resolve(),)
    )
    if options.target.startswith("fixture:"):
        target = resolve_target(options.target, db_url=options.db, checkout=worktree, confinement=confinement)
    else:
        spec = Path(options.target).resolve()
        _check_spec(spec)
        relative = spec.relative_to(repo)
        placed = worktree / relative
        placed.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(spec, placed)  # the working tree's spec: one plan for both revisions
        target = resolve_target(str(relative), checkout=worktree, confinement=confinement)
    # CI_COMMIT_SHA names the working tree's commit; this side ran REF's.
    target.pin_revision(Revision(commit_sha=commit, dirty=False))
    return target


def side_labels(ref: str, commit: str) -> tuple[str, str]:
    """How the two sides are named wherever they are shown: ``working tree`` and ``HEAD 887c0c16``."""
    return "working tree", f"{ref} {commit[:8]}"


def run_baseline(
    options: RunOptions,
    ref: str,
    consumers: Sequence[Consumer] = (),
    say: Callable[[str], None] = lambda line: None,
) -> ComparisonResult:
    """Attack REF's code and the working tree's with one plan; bundle both as one comparison.
    `say` is told which side is attacked before each run's own output."""
    check_options(options)
    if options.checkout is not None:
        raise _usage(
            "--baseline cannot be combined with --checkout: --baseline serves REF from a worktree itself"
        )
    repo = _repository(options)
    commit = resolve_commit(repo, ref)
    if commit is None:
        raise _usage(
            f"--baseline: got {ref!r}, which names no commit in {repo}; try HEAD~1, a branch or a sha"
        )
    seed = options.seed if options.seed is not None else secrets.randbits(32)
    started = utcnow()
    current = replace(options, seed=seed)
    if not options.target.startswith("fixture:"):
        _check_spec(Path(options.target))
    tree, base = side_labels(ref, commit)
    with leased_worktree(repo, commit, label="baseline") as worktree:
        before_target = _baseline_target(current, repo, worktree, commit)
        say(f"baseline: {base} (its code checked out in a worktree), seed {seed}")
        before = run(current, consumers, target=before_target)
    say(f"baseline: {tree} (your uncommitted changes), seed {seed}")
    after = run(current, consumers)
    labels = (f"{options.target}: {tree}", f"{options.target}: {base}")
    return bundle_comparison(options.out, [after, before], seed=seed, started_at=started, targets=labels)
