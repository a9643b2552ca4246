"""What the sandbox costs the repair flow's verify, per checkout.

Verify attacks the patched checkout (the lab, out of process) and runs its checks (pytest
judged by its JUnit report against the head's collection, ruff, bandit). Both are measured
side by side, on the same worktree of a scratch repository (the recipe's patch applied),
interleaved, in one run:

* before: the code under repair unsandboxed (``--unsandboxed``: the lab's own user, the host's
  namespaces; what verify did before the sandbox, plus the private copy and the pinned schema,
  which every mode has);
* after: the sandbox this machine gives (bubblewrap and the unprivileged user as root).

The figure is the ratio of the medians (target: at most 1.5x).

``python -m bench.flow_verify [--quick]`` prints the figures.
"""

from __future__ import annotations

import dataclasses
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from bench.figures import Figure, print_figure

TARGET_RATIO = 1.5


def _timed(fn: Callable[[], object]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def figures(quick: bool = False) -> list[Figure]:
    from acklab.flows import checks
    from acklab.flows.diffs import make_diff
    from acklab.flows.lab import run_lab
    from acklab.flows.sandbox import choose
    from acklab.flows.scratch_repo import make_scratch_repo
    from acklab.flows.spec import VerifyCommand, load_spec
    from acklab.flows.worktree import head_sha, worktree

    root = Path(__file__).resolve().parents[1]
    spec = load_spec(root / "flows" / "repair.yaml")
    if quick:
        quick_tests = ("python", "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/app/test_seam.py")
        verify = tuple(VerifyCommand(c.name, quick_tests) if c.name == "pytest" else c for c in spec.verify)
        spec = dataclasses.replace(spec, verify=verify)
    # One of each, after a warming attack: a verify is ~30 s (its pytest most of it) and the sandbox
    # has cost 0.97-1.08x of it in every committed run, against 1.5x; a second pair was 60 s of the
    # bench's 20 minutes.
    runs = 1
    work = Path(tempfile.mkdtemp(prefix="acklab-bench-verify-"))
    try:
        repo = work / "repo"
        make_scratch_repo(repo)
        out = work / "out"
        patch = make_diff(
            "app/webhooks.py",
            (repo / "app" / "webhooks.py").read_text(),
            (root / "app" / "webhooks.py").read_text(),
        )

        class _Trail:  # verify's checks write their logs into the trail; here, nowhere
            def write_text(self, relpath: str, text: str) -> str:
                return relpath

        modes = {"before": choose(unsandboxed=True, hide=(out,)), "after": choose(hide=(out,))}
        timings: dict[str, list[float]] = {"before": [], "after": []}
        expected = head_sha(repo)
        with (
            worktree(repo, expected, label="head") as head,
            worktree(repo, expected, label="patched") as wt,
        ):
            wt.apply(patch)

            def attack(mode: str) -> None:
                run_lab(
                    wt.path,
                    target="fixture:live",
                    experiments=["lost-ack"],
                    trials=spec.trials,
                    seed=spec.seed,
                    out=out,
                    sandbox=modes[mode],
                    schema_from=head.path,
                )

            def verify(mode: str) -> Callable[[], None]:
                def once() -> None:
                    attack(mode)
                    checks.run_checks(spec, wt, _Trail(), lambda _: None, head=head, sandbox=modes[mode])  # type: ignore[arg-type]

                return once

            # The flow imports the harness once per process: not a per-checkout cost. The attack
            # alone warms it; the checks (pytest, ruff, bandit, ~35 s) are processes of their own.
            attack("after")
            for _ in range(runs):
                for mode in ("before", "after"):
                    timings[mode].append(_timed(verify(mode)))
    finally:
        shutil.rmtree(work, ignore_errors=True)  # the scratch repository, its worktrees and the evidence
    before, after = (statistics.median(timings[m]) for m in ("before", "after"))
    ratio = after / before if before else None
    note = (
        f"median of {runs}; verify (lost-ack x{spec.trials} + {', '.join(c.name for c in spec.verify)}) "
        f"{before:.2f} s unsandboxed -> {after:.2f} s in {modes['after'].name}; each run, in order: "
        + "; ".join(f"{m} {', '.join(f'{t:.1f}' for t in timings[m])} s" for m in ("before", "after"))
    )
    return [
        Figure(
            name="verify: wall time per checkout in the sandbox, against unsandboxed",
            value=round(after, 3),
            unit="s",
            baseline=round(before, 3),
            ratio=round(ratio, 3) if ratio else None,
            target=f"<= {TARGET_RATIO:g}x",
            met=ratio is not None and ratio <= TARGET_RATIO,
            note=note,
        )
    ]


if __name__ == "__main__":
    for figure in figures(quick="--quick" in sys.argv):
        print_figure(figure)
