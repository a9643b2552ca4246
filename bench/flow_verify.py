"""What it costs the repair flow's verify to keep the patch out of the lab's reach, per checkout.

Verify attacks the patched checkout and runs its tests. Both are measured side by side, on
the same worktree of a sandbox (the recipe's patch applied), the way verify did it before
(the baseline) and the way it does now:

* the lab: before, ``acklab run --json`` in a subprocess rooted in the worktree (the lab
  and the patched handler in one interpreter); now, the flow's own harness attacking the
  worktree's fixture served by a process of its own (``--checkout``);
* the test check: before, pytest's exit code; now, pytest writing a JUnit report outside
  the worktree while the head's tests are collected beside it.

The figure is the added wall time per checkout (median of interleaved runs; target < 2 s).

``python -m bench.flow_verify [--quick]`` prints the figures.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from bench.figures import Figure, print_figure

BUDGET_S = 2.0
_RUN = "import sys; from acklab.cli import main; main(sys.argv[1:])"


def _timed(fn: Callable[[], object]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def figures(quick: bool = False) -> list[Figure]:
    from acklab.flows import checks
    from acklab.flows.diffs import make_diff
    from acklab.flows.lab import run_lab
    from acklab.flows.scratch_repo import make_scratch_repo
    from acklab.flows.spec import load_spec
    from acklab.flows.worktree import head_sha, python_env, worktree

    root = Path(__file__).resolve().parents[1]
    spec = load_spec(root / "flows" / "repair.yaml")
    [pytest_command] = [c for c in spec.verify if c.name == "pytest"]
    argv = [sys.executable, *pytest_command.argv[1:]]
    if quick:
        argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/app/test_seam.py"]
    runs = 2 if quick else 3
    work = Path(tempfile.mkdtemp(prefix="acklab-bench-verify-"))
    sandbox = work / "sandbox"
    make_scratch_repo(sandbox)
    out = work / "out"
    patch = make_diff(
        "app/webhooks.py",
        (sandbox / "app" / "webhooks.py").read_text(),
        (root / "app" / "webhooks.py").read_text(),
    )

    class _Trail:  # verify's checks write their logs into the trail; here, nowhere
        def write_text(self, relpath: str, text: str) -> str:
            return relpath

    timings: dict[str, list[float]] = {
        "lab_before": [],
        "lab_after": [],
        "tests_before": [],
        "tests_after": [],
    }
    expected = head_sha(sandbox)
    with (
        worktree(sandbox, expected, label="head") as head,
        worktree(sandbox, expected, label="patched") as wt,
    ):
        wt.apply(patch)

        def lab_before() -> None:
            run = ["run", "--target", "fixture:live", "--experiment", "lost-ack", "--json", "--out", str(out)]
            subprocess.run(  # the subprocess rooted in the worktree, as verify ran it before
                [sys.executable, "-c", _RUN, *run, "--trials", str(spec.trials), "--seed", str(spec.seed)],
                cwd=wt.path,
                env=python_env(wt.path),
                capture_output=True,
                check=False,
            )

        def lab_after() -> None:
            run_lab(
                wt.path,
                target="fixture:live",
                experiments=["lost-ack"],
                trials=spec.trials,
                seed=spec.seed,
                out=out,
            )

        def tests_before() -> None:
            subprocess.run(argv, cwd=wt.path, env=python_env(wt.path), capture_output=True, check=False)

        def tests_after() -> None:
            checks.pytest_check(argv, wt, head, spec, trail=_Trail(), name="pytest")  # type: ignore[arg-type]

        lab_after()  # the flow imports the harness once per process: not a per-checkout cost
        for _ in range(runs):
            for name, fn in (
                ("lab_before", lab_before),
                ("lab_after", lab_after),
                ("tests_before", tests_before),
                ("tests_after", tests_after),
            ):
                timings[name].append(_timed(fn))
    median = {name: statistics.median(values) for name, values in timings.items()}
    before = median["lab_before"] + median["tests_before"]
    after = median["lab_after"] + median["tests_after"]
    added = after - before
    note = (
        f"median of {runs}; lab {median['lab_before']:.2f} -> {median['lab_after']:.2f} s, "
        f"tests {median['tests_before']:.2f} -> {median['tests_after']:.2f} s"
    )
    return [
        Figure(
            name="verify: added wall time per checkout (out-of-process lab + JUnit test check)",
            value=round(added, 3),
            unit="s",
            baseline=round(before, 3),
            ratio=round(after / before, 3) if before else None,
            target=f"< {BUDGET_S:g} s",
            met=added < BUDGET_S,
            note=note,
        )
    ]


if __name__ == "__main__":
    for figure in figures(quick="--quick" in sys.argv):
        print_figure(figure)
