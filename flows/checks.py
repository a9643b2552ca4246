"""Verify's checks (pytest, ruff, bandit ... from the spec) and the measured options for a gap.

Both take values (the spec, a worktree, the runs to weigh), never the flow itself. Every check
runs in the sandbox (`flows.sandbox`), in a private copy of the patched worktree of its own,
loopback-only, with an allowlisted environment; a check whose code rewrote files of its copy
ends the flow refused (exit 5). A patch cannot switch a linter's rule off in a comment: ruff
runs with ``--ignore-noqa``, bandit with ``--ignore-nosec`` (`hardened`), whatever the spec says.
"""

from __future__ import annotations

import contextlib
import subprocess  # nosec B404
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from acklab.evidence.documents.trail import CheckRecord, CheckReport
from acklab.harness.procs.confinement import Confined, Confinement, Launch

from . import guard, report
from .candidate import Candidate
from .errors import PatchTampered
from .lab import ExperimentResult, LabRun
from .proposers import ProposalRequest
from .proposers.recipe import RecipeProposer
from .pytest_report import collected, is_pytest, judge, read_report, read_written
from .spec import FlowSpec
from .worktree import Worktree, worktree

if TYPE_CHECKING:
    from .trail import Trail

LabRunner = Callable[[Worktree, Sequence[str], str], LabRun]


LINTER_FLAGS = (("ruff", "check", "--ignore-noqa"), ("bandit", None, "--ignore-nosec"))


def hardened(argv: list[str]) -> list[str]:
    """`argv` with ruff's ``--ignore-noqa`` (``ruff check``) and bandit's ``--ignore-nosec`` added: a
    comment in the patched file may not switch a rule off."""
    names = [Path(a).name for a in argv]
    for tool, sub, flag in LINTER_FLAGS:
        if tool not in names or flag in argv:
            continue
        at = names.index(tool) + 1
        if sub is not None:
            if sub not in argv[at:]:
                continue
            at = argv.index(sub, at) + 1
        argv = [*argv[:at], flag, *argv[at:]]
    return argv


def run_checks(
    spec: FlowSpec,
    checkout: Worktree,
    trail: Trail,
    say: Callable[[str], None],
    *,
    head: Worktree,
    sandbox: Confinement,
) -> list[CheckRecord]:
    """Run every verify command in a sandboxed copy of `checkout`; their output goes to the bundle's
    checks/ folder.

    A pytest command is judged by its JUnit report and the tests collected at `head`
    (`pytest_report`), never by its exit code alone.
    """
    results = []
    for command in spec.verify:
        argv = hardened(
            [sys.executable if command.argv[0] == "python" else command.argv[0], *command.argv[1:]]
        )
        started = time.perf_counter()
        report_of: CheckReport | None = None
        if is_pytest(argv):
            code, output, reasons, report_of = pytest_check(
                argv, checkout, head, spec, trail=trail, name=command.name, sandbox=sandbox
            )
        else:
            place = sandbox.prepare(checkout.path, label=f"check-{command.name}")
            try:
                code, output = _run(argv, place, spec)
            finally:
                _close_untouched(place, command.name)
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


def _close_untouched(place: Confined, name: str) -> None:
    """Close `place`; PatchTampered (exit 5) when the check's code rewrote files of its copy."""
    changed = place.changed()
    place.close()
    if changed:
        raise PatchTampered(
            f"the code under repair rewrote {', '.join(changed[:5])} while verify's {name} check ran; "
            "what ran is not what was approved"
        )


def _run(
    argv: list[str], place: Confined, spec: FlowSpec, env: dict[str, str] | None = None
) -> tuple[int, str]:
    """`argv` in the sandboxed `place` (loopback only), its copy first on the import path."""
    own = {"PYTHONPATH": str(place.root), **(env or {})}
    launch = place.launch(Launch(tuple(argv), own, place.root), network="loopback")
    try:
        done = subprocess.run(  # nosec B603
            list(launch.argv),
            cwd=launch.cwd,
            env=dict(launch.env),
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
    argv: list[str],
    checkout: Worktree,
    head: Worktree,
    spec: FlowSpec,
    *,
    trail: Trail,
    name: str,
    sandbox: Confinement,
) -> tuple[int, str, list[str], CheckReport]:
    """pytest in a sandboxed copy of the patched worktree writing its report in its scratch directory,
    the head's tests collected beside it (in a copy of their own): (exit code, output, reasons it
    fails, what the report held)."""
    place = sandbox.prepare(checkout.path, label=f"check-{name}")
    head_place = sandbox.prepare(head.path, label=f"head-{name}")
    try:
        report_path = place.scratch / "report" / "junit.xml"
        with ThreadPoolExecutor(max_workers=1) as pool:
            # The head's collection runs while the patched tests do: it costs no wall time.
            baseline = pool.submit(collected, head_place, argv, spec.verify_timeout_s)
            code, output = _run([*argv, f"--junitxml={report_path}"], place, spec)
            expected = baseline.result()
        report = read_report(report_path)
        with contextlib.suppress(OSError):
            written = read_written(report_path)
            trail.write_text(f"checks/{name}.junit.xml", written.decode("utf-8", errors="replace"))
        reasons = judge(code, report, expected)
        held = CheckReport(
            tests=len(report.outcomes),
            passed=report.count("passed"),
            collected_at_head=len(expected),
            junit=f"checks/{name}.junit.xml" if report_path.is_file() else None,
        )
        return code, output, reasons, held
    finally:
        head_place.close()
        _close_untouched(place, name)


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
