"""Verify's checks (pytest, ruff, bandit ... from the spec) and the measured options for a gap.

Both take values (the spec, a worktree, the runs to weigh), never the flow itself.
"""

from __future__ import annotations

import shutil
import subprocess  # nosec B404
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from acklab.evidence.documents.trail import CheckRecord, CheckReport
from acklab.harness.procs.leases import current_book

from . import guard, report
from .candidate import Candidate
from .lab import ExperimentResult, LabRun
from .proposers import ProposalRequest
from .proposers.recipe import RecipeProposer
from .pytest_report import MAX_REPORT_BYTES, collected, is_pytest, judge, read_report
from .spec import FlowSpec
from .worktree import Worktree, python_env, worktree

if TYPE_CHECKING:
    from .trail import Trail

LabRunner = Callable[[Worktree, Sequence[str], str], LabRun]


def run_checks(
    spec: FlowSpec, checkout: Worktree, trail: Trail, say: Callable[[str], None], *, head: Worktree
) -> list[CheckRecord]:
    """Run every verify command in `checkout`; their output goes to the bundle's checks/ folder.

    A pytest command is judged by its JUnit report and the tests collected at `head`
    (`pytest_report`), never by its exit code alone.
    """
    results = []
    for command in spec.verify:
        argv = [sys.executable if command.argv[0] == "python" else command.argv[0], *command.argv[1:]]
        started = time.perf_counter()
        report_of: CheckReport | None = None
        if is_pytest(argv):
            code, output, reasons, report_of = pytest_check(
                argv, checkout, head, spec, trail=trail, name=command.name
            )
        else:
            code, output = _run(argv, checkout.path, spec)
            reasons = [] if code == 0 else [f"exit {code}"]
        log = trail.write_text(f"checks/{command.name}.log", output)
        status: Literal["ok", "failed"] = "ok" if code == 0 and not reasons else "failed"
        duration = round((time.perf_counter() - started) * 1000, 3)
        why = f": {'; '.join(reasons)}" if reasons and status == "failed" else ""
        say(f"verify: {command.name} {status} (exit {code}, {duration:.0f} ms){why}")
        results.append(
            CheckRecord(
                name=command.name,
                argv=list(command.argv),
                status=status,
                exit_code=code,
                duration_ms=duration,
                log=log,
                report=report_of,
                reasons=reasons if status == "failed" else None,
            )
        )
    return results


def _run(argv: list[str], cwd: Path, spec: FlowSpec) -> tuple[int, str]:
    try:
        done = subprocess.run(  # nosec B603
            argv,
            cwd=cwd,
            env=python_env(cwd),
            capture_output=True,
            text=True,
            timeout=spec.verify_timeout_s,
            check=False,
        )
        return done.returncode, done.stdout + done.stderr
    except subprocess.TimeoutExpired as exc:
        partial = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else exc.stdout
        return -1, f"timed out after {spec.verify_timeout_s}s\n{partial or ''}"
    except FileNotFoundError:
        return 127, f"{argv[0]}: not found; install it or change verify.commands in {spec.path}"


def pytest_check(
    argv: list[str], checkout: Worktree, head: Worktree, spec: FlowSpec, *, trail: Trail, name: str
) -> tuple[int, str, list[str], CheckReport]:
    """pytest in the patched worktree writing its report outside it, the head's tests collected beside
    it: (exit code, output, reasons it fails, what the report held)."""
    leases = current_book()
    scratch = Path(tempfile.mkdtemp(prefix="acklab-junit-"))
    lease = leases.acquire("directory", str(scratch), path=str(scratch))
    try:
        (scratch / "head").mkdir()
        report_path = scratch / "report" / "junit.xml"
        with ThreadPoolExecutor(max_workers=1) as pool:
            # The head's collection runs while the patched tests do: it costs no wall time.
            baseline = pool.submit(collected, head.path, argv, scratch / "head", spec.verify_timeout_s)
            code, output = _run([*argv, f"--junitxml={report_path}"], checkout.path, spec)
            expected = baseline.result()
        report = read_report(report_path)
        if report_path.is_file() and report_path.stat().st_size <= MAX_REPORT_BYTES:
            trail.write_text(
                f"checks/{name}.junit.xml", report_path.read_text(encoding="utf-8", errors="replace")
            )
        reasons = judge(code, report, expected)
        held = CheckReport(
            tests=len(report.outcomes),
            passed=report.count("passed"),
            collected_at_head=len(expected),
            junit=f"checks/{name}.junit.xml" if report_path.is_file() else None,
        )
        return code, output, reasons, held
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        leases.release(lease)


def options_for_gaps(
    *,
    spec: FlowSpec,
    repo: Path,
    expected: str,
    request: ProposalRequest,
    proposal: Candidate,
    baseline: Mapping[str, ExperimentResult],
    current: Mapping[str, ExperimentResult],
    lab: LabRunner,
) -> list[dict[str, Any]]:
    """Two options with measured gain and cost, in a fixed order; neither is recommended.

    `baseline`: every experiment on the head (reproduce, strike-again before); `current`: on
    the patch (verify, strike-again after); `lab` attacks a worktree with experiments.
    """
    options = [
        report.measure_option(
            key="A",
            title=f"publish {proposal.id} as it is, with the gaps",
            results=dict(current),
            baseline=dict(baseline),
            changed_lines=proposal.changed_lines,
            note="measured: the runs of verify and strike-again on this patch",
        )
    ]
    alternative = None
    if proposal.proposer != "recipe":
        alternative = _recipe_option(
            spec=spec, repo=repo, expected=expected, request=request, baseline=baseline, lab=lab
        )
    if alternative is None:
        alternative = report.measure_option(
            key="B",
            title="publish nothing; keep the head as it is",
            results={name: baseline[name] for name in current},
            baseline=dict(baseline),
            changed_lines=0,
            note="measured: the runs of reproduce and strike-again on the head",
        )
    options.append(alternative)
    return options


def _recipe_option(
    *,
    spec: FlowSpec,
    repo: Path,
    expected: str,
    request: ProposalRequest,
    baseline: Mapping[str, ExperimentResult],
    lab: LabRunner,
) -> dict[str, Any] | None:
    recipe = RecipeProposer(spec.recipe).propose(request)
    if recipe.problems:
        return None
    verdict = guard.check(recipe.diff, spec=spec, repo=repo, commit=expected)
    if not verdict.allowed:
        return None
    names = [*request.failing_experiments, *spec.strike_again]
    with worktree(repo, expected, label="option") as checkout:
        checkout.apply(recipe.diff)
        run = lab(checkout, names, "option B (recipe)")
    return report.measure_option(
        key="B",
        title=f"replace the patch with the {spec.recipe} recipe (a new proposal, approved on its own)",
        results=run.experiments,
        baseline=dict(baseline),
        changed_lines=verdict.changed_lines,
        note="measured: the recipe applied in its own worktree and attacked with the same experiments; "
        "to take it, reject here and run the flow with --proposer recipe",
    )
