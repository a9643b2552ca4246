"""Verify's checks (pytest, ruff, bandit ... from the spec) and the measured options for a gap."""

from __future__ import annotations

import subprocess  # nosec B404
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from . import guard, report
from .proposers.recipe import RecipeProposer
from .spec import FlowSpec
from .worktree import Worktree, python_env, worktree

if TYPE_CHECKING:
    from .runner import _Flow
    from .trail import Trail


def run_checks(
    spec: FlowSpec, checkout: Worktree, trail: Trail, say: Callable[[str], None]
) -> list[dict[str, Any]]:
    """Run every verify command in `checkout`; their output goes to the bundle's checks/ folder."""
    results = []
    for command in spec.verify:
        argv = [sys.executable if command.argv[0] == "python" else command.argv[0], *command.argv[1:]]
        started = time.perf_counter()
        try:
            done = subprocess.run(  # nosec B603
                argv,
                cwd=checkout.path,
                env=python_env(checkout.path),
                capture_output=True,
                text=True,
                timeout=spec.verify_timeout_s,
                check=False,
            )
            code, output = done.returncode, done.stdout + done.stderr
        except subprocess.TimeoutExpired as exc:
            partial = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else exc.stdout
            code, output = -1, f"timed out after {spec.verify_timeout_s}s\n{partial or ''}"
        except FileNotFoundError:
            code, output = 127, f"{argv[0]}: not found; install it or change verify.commands in {spec.path}"
        log = trail.write_text(f"checks/{command.name}.log", output)
        status = "ok" if code == 0 else "failed"
        duration = round((time.perf_counter() - started) * 1000, 3)
        say(f"verify: {command.name} {status} (exit {code}, {duration:.0f} ms)")
        results.append(
            {
                "name": command.name,
                "argv": list(command.argv),
                "status": status,
                "exit_code": code,
                "duration_ms": duration,
                "log": log,
            }
        )
    return results


def options_for_gaps(
    flow: _Flow, proposal: dict[str, Any], comparisons: list[report.Comparison]
) -> list[dict[str, Any]]:
    """Two options with measured gain and cost, in a fixed order; neither is recommended."""
    baseline = {**flow.repro.experiments, **flow.before.experiments}
    current = {**flow.verify_run.experiments, **{c.experiment: c.after for c in comparisons}}
    options = [
        report.measure_option(
            key="A",
            title=f"publish {proposal['id']} as it is, with the gaps",
            results=current,
            baseline=baseline,
            changed_lines=proposal["changed_lines"],
            note="measured: the runs of verify and strike-again on this patch",
        )
    ]
    alternative = _recipe_option(flow, proposal, baseline)
    if alternative is None:
        alternative = report.measure_option(
            key="B",
            title="publish nothing; keep the head as it is",
            results={name: baseline[name] for name in current},
            baseline=baseline,
            changed_lines=0,
            note="measured: the runs of reproduce and strike-again on the head",
        )
    options.append(alternative)
    return options


def _recipe_option(flow: _Flow, proposal: dict[str, Any], baseline: dict[str, Any]) -> dict[str, Any] | None:
    if proposal["proposer"] == "recipe":
        return None
    recipe = RecipeProposer(flow.spec.recipe).propose(flow.request(None))
    if recipe.problems:
        return None
    verdict = guard.check(recipe.diff, spec=flow.spec, repo=flow.c.repo, commit=flow.expected)
    if not verdict.allowed:
        return None
    names = [*flow.failing, *flow.spec.strike_again]
    with worktree(flow.c.repo, flow.expected, label="option") as checkout:
        checkout.apply(recipe.diff)
        run = flow.lab(checkout, names, "option B (recipe)")
    return report.measure_option(
        key="B",
        title=f"replace the patch with the {flow.spec.recipe} recipe (a new proposal, approved on its own)",
        results=run.experiments,
        baseline=baseline,
        changed_lines=verdict.changed_lines,
        note="measured: the recipe applied in its own worktree and attacked with the same experiments; "
        "to take it, reject here and run the flow with --proposer recipe",
    )
