"""``acklab run --compare-with TARGET[,TARGET…]``: one plan against several targets, one bundle.

Runs that belong together share a plan: every target is attacked with the same experiments,
trials and seed, so delivery k of an event meets the same fault on each of them and the
console can set them side by side, delivery by delivery.

Layout. A comparison is the directory ``<out>/<comparison_id>/``::

    comparison.json   the seed, the experiments, and each target's run
    <run_id>/         one ordinary run bundle per target (run.json, incidents/, trials/, ...)
    manifest.json     kind "comparison", over every file above, nested bundles included

Each run executes in the evidence directory itself, like ``acklab run`` (its leases and
journal entries land in ``<out>/journal.sqlite``), and its finished bundle is renamed into
the comparison when every run has ended, as a sweep does. An interrupted comparison leaves
the runs that finished as ordinary bundles with the one seed (still comparable), and the
interrupted one resumable with ``acklab run --resume``.

The exit code is ``--target``'s: the compared targets are references (an unsafe handler is
expected to fail). A compared target the lab could not judge makes a passing run exit 4.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from acklab.evidence.bundle import BundleWriter
from acklab.evidence.clock import utcnow
from acklab.evidence.documents.comparison import ComparisonDocument
from acklab.evidence.documents.result import RunResultJson
from acklab.evidence.exitcodes import ExitCode
from acklab.harness.core.run_events import Consumer
from acklab.harness.engine.runner import RunOptions, RunResult, run
from acklab.harness.errors import HarnessError, RunInterrupted, UsageError

COMPARISON_FILE = "comparison.json"
MAX_TARGETS = 8


@dataclass(frozen=True)
class ComparisonResult:
    """Every target's run (``--target``'s first), moved into the comparison's bundle."""

    doc: ComparisonDocument
    bundle: Path
    runs: tuple[RunResult, ...]

    @property
    def exit_code(self) -> ExitCode:
        primary = self.runs[0].exit_code
        others_erred = any(r.exit_code == ExitCode.LAB_ERROR for r in self.runs[1:])
        return ExitCode.LAB_ERROR if primary == ExitCode.OK and others_erred else primary

    def result_json(self) -> RunResultJson:
        """``--target``'s ``--json`` object, plus the comparison and the compared runs."""
        return (
            self.runs[0]
            .result_json()
            .with_comparison(str(self.bundle.resolve()), [r.result_json() for r in self.runs[1:]])
        )

    def as_json(self) -> dict[str, Any]:
        """Exactly what ``acklab run --compare-with ... --json`` prints."""
        return self.result_json().dump()


def _usage(message: str) -> UsageError:
    return UsageError(message)


def compared_targets(primary: str, values: Sequence[str]) -> tuple[str, ...]:
    """``--target`` then every ``--compare-with`` target (comma-separated or repeated), once each."""
    targets = [primary]
    for value in values:
        for part in value.split(","):
            name = part.strip()
            if not name:
                raise _usage(f"--compare-with: got an empty target in {value!r}; expected TARGET[,TARGET...]")
            if name not in targets:
                targets.append(name)
    if len(targets) < 2:
        raise _usage(f"--compare-with: nothing to compare {primary!r} with; name another target")
    if len(targets) > MAX_TARGETS:
        raise _usage(f"--compare-with: got {len(targets)} targets; at most {MAX_TARGETS} in one comparison")
    return tuple(targets)


def new_comparison_id() -> str:
    return "cmp-" + datetime.now(UTC).strftime("%Y%m%d-%H%M%S") + f"-{secrets.token_hex(3)}"


def check_options(options: RunOptions) -> None:
    """A comparison starts fresh plans: --resume and --shard belong to a single run."""
    if options.resume:
        raise _usage(
            "--compare-with cannot be combined with --resume: resume each interrupted run on its own "
            "(acklab run --resume RUN_ID --target TARGET)"
        )
    if options.shard:
        raise _usage("--compare-with cannot be combined with --shard: a comparison runs every trial")


def run_comparison(
    options: RunOptions, targets: Sequence[str], consumers: Sequence[Consumer] = ()
) -> ComparisonResult:
    """Run the same plan (one seed) against every target, then bundle the runs together."""
    check_options(options)
    seed = options.seed if options.seed is not None else secrets.randbits(32)
    started = utcnow()
    finished: list[RunResult] = []
    for target in targets:
        try:
            finished.append(run(replace(options, target=target, seed=seed), consumers))
        except RunInterrupted as exc:
            kept = ", ".join(str(r.bundle) for r in finished) or "none"
            raise RunInterrupted(
                f"{exc}; the comparison (seed {seed}) was not bundled: finished runs kept as they are ({kept})"
            ) from None
    return bundle_comparison(options.out, finished, seed=seed, started_at=started, targets=targets)


def bundle_comparison(
    out: Path, finished: Sequence[RunResult], *, seed: int, started_at: str, targets: Sequence[str]
) -> ComparisonResult:
    """Move each finished run bundle into a new comparison bundle and seal it with a manifest."""
    comparison_id = new_comparison_id()
    writer = BundleWriter(out / comparison_id, kind="comparison")
    moved: list[RunResult] = []
    for result in finished:
        destination = writer.root / result.bundle.name
        try:
            os.replace(result.bundle, destination)  # one file system: in one place or the other
        except OSError as exc:
            raise HarnessError(
                f"cannot move {result.bundle} into the comparison {writer.root}: {exc}"
            ) from exc
        moved.append(replace(result, bundle=destination))
    doc = ComparisonDocument.build(
        comparison_id=comparison_id,
        seed=seed,
        targets=targets,
        runs=[(r.document, r.bundle.name) for r in moved],
        started_at=started_at,
        ended_at=utcnow(),
    )
    writer.write_document(COMPARISON_FILE, doc)
    return ComparisonResult(doc, writer.finalize(), tuple(moved))
