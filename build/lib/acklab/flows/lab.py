"""The lab, as the flow sees it: `acklab run --json` in a subprocess rooted in a worktree.

The harness runs as a separate process whose working directory and PYTHONPATH are the
worktree, so `app.webhooks` is imported from the checkout under test (the head, or the
patched copy) and never from the installed project. `resolved_module` proves it per run.
"""

from __future__ import annotations

import json
import math
import subprocess  # nosec B404
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import FlowError
from .worktree import python_env

HARNESS_TIMEOUT_S = 1800
_RUN = "import sys; from acklab.cli import main; main(sys.argv[1:])"
_WHERE = "import importlib.util, sys; print(importlib.util.find_spec(sys.argv[1]).origin)"


@dataclass(frozen=True)
class Latency:
    """Percentiles of the deliveries' latency, in milliseconds."""

    p50: float
    p95: float
    deliveries: int

    def as_dict(self) -> dict[str, float | int]:
        return {"p50_ms": self.p50, "p95_ms": self.p95, "deliveries": self.deliveries}


@dataclass(frozen=True)
class ExperimentResult:
    name: str
    verdict: str
    trials: int
    violations: list[dict[str, Any]] = field(default_factory=list)
    incident: str | None = None
    error: str | None = None
    latency: Latency | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "verdict": self.verdict,
            "trials": self.trials,
            "violations": len(self.violations),
            "incident": self.incident,
            "latency": self.latency.as_dict() if self.latency else None,
        }


@dataclass(frozen=True)
class LabRun:
    """One `acklab run` of one checkout."""

    run_id: str
    verdict: str
    target: str
    bundle: str | None
    experiments: dict[str, ExperimentResult]
    exit_code: int
    handler_module: str

    def failing(self) -> list[str]:
        return [n for n, e in self.experiments.items() if e.verdict == "fail"]

    def errored(self) -> list[str]:
        return [n for n, e in self.experiments.items() if e.verdict == "error"]


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (no interpolation: a reported p95 is a latency that happened)."""
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return round(ordered[rank - 1], 3)


def resolved_module(checkout: Path, module: str = "acklab.app.webhooks") -> str:
    """The file `module` is imported from by a process the flow starts in `checkout`."""
    done = subprocess.run(  # nosec B603
        [sys.executable, "-c", _WHERE, module],
        cwd=checkout,
        env=python_env(checkout),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if done.returncode != 0:
        raise FlowError(f"cannot locate {module} in {checkout}: {done.stderr.strip()[-500:]}")
    return done.stdout.strip()


def run_lab(
    checkout: Path,
    *,
    target: str,
    experiments: Sequence[str],
    trials: int,
    seed: int,
    out: Path,
) -> LabRun:
    """Attack `checkout` with `experiments`; raise FlowError (exit 4) when the lab could not run."""
    module = resolved_module(checkout)
    if not Path(module).resolve().is_relative_to(checkout.resolve()):
        raise FlowError(
            f"acklab.app.webhooks resolves to {module}, outside the checkout under test {checkout}; "
            "the lab would attack the wrong code (is PYTHONPATH or PYTHONSAFEPATH forced?)"
        )
    argv = [sys.executable, "-c", _RUN, "run", "--target", target, "--trials", str(trials)]
    argv += ["--seed", str(seed), "--out", str(out.resolve()), "--json"]
    for name in experiments:
        argv += ["--experiment", name]
    try:
        done = subprocess.run(  # nosec B603
            argv,
            cwd=checkout,
            env=python_env(checkout),
            capture_output=True,
            text=True,
            timeout=HARNESS_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise FlowError(f"the lab did not finish within {HARNESS_TIMEOUT_S}s in {checkout}") from exc
    # The harness's human output (stderr) is not repeated: the flow reports each verdict itself.
    if done.returncode not in (0, 1, 4):
        raise FlowError(f"`acklab run` exited {done.returncode} in {checkout}: {done.stderr.strip()[-800:]}")
    try:
        doc = json.loads(done.stdout)
    except ValueError as exc:
        raise FlowError(
            f"`acklab run --json` printed no JSON (exit {done.returncode}): "
            f"{(done.stdout or done.stderr).strip()[-800:]}"
        ) from exc
    return _parse(doc, checkout=checkout, exit_code=done.returncode, module=module)


def _parse(doc: dict[str, Any], *, checkout: Path, exit_code: int, module: str) -> LabRun:
    bundle = doc.get("bundle")
    bundle_path = (checkout / bundle).resolve() if bundle else None
    results: dict[str, ExperimentResult] = {}
    for exp in doc.get("experiments", []):
        incident = exp.get("incident")
        incident_path = _locate(incident, bundle_path, checkout)
        results[exp["name"]] = ExperimentResult(
            name=exp["name"],
            verdict=exp["verdict"],
            trials=int(exp.get("trials", 0)),
            violations=list(exp.get("violations", [])),
            incident=str(incident_path) if incident_path else None,
            error=exp.get("error"),
            latency=latency_of(incident_path) if incident_path else None,
        )
    return LabRun(
        run_id=str(doc.get("run_id", "")),
        verdict=str(doc.get("verdict", "error")),
        target=str(doc.get("target", "")),
        bundle=str(bundle_path) if bundle_path else None,
        experiments=results,
        exit_code=exit_code,
        handler_module=module,
    )


def _locate(incident: str | None, bundle: Path | None, checkout: Path) -> Path | None:
    if not incident:
        return None
    for base in (bundle, checkout):
        if base is not None and (base / incident).is_file():
            return (base / incident).resolve()
    path = Path(incident)
    return path.resolve() if path.is_file() else None


def latency_of(incident_path: Path) -> Latency | None:
    """p50/p95 of an incident's deliveries: the harness's own summary, else computed from them."""
    try:
        incident = json.loads(incident_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    values = [
        float(d["latency_ms"])
        for trial in incident.get("trials", [])
        for d in trial.get("deliveries", [])
        if d.get("status") is not None and d.get("latency_ms") is not None
    ]
    summary = (incident.get("summary") or {}).get("latency_ms") or {}
    if "p50" in summary and "p95" in summary:
        return Latency(p50=float(summary["p50"]), p95=float(summary["p95"]), deliveries=len(values))
    if not values:
        return None
    return Latency(p50=percentile(values, 50), p95=percentile(values, 95), deliveries=len(values))
