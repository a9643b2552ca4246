"""The lab, as the flow sees it: `acklab run --target fixture:live --checkout DIR`, in this process.

The code under test (the head, the patched copy, an option's copy) is never imported here.
The harness serves each checkout's fixture in processes of its own, started from the
checkout (`harness.targets.checkout`), attacks them over a loopback socket and reads the
effects back from their database itself. The verdicts are computed by the flow's own
harness, which no handler can reach: a patch that rewrites the verdict code through
`sys.modules`, or exits early, does so in a process whose word the lab never takes.
`run_lab` checks after every run that no module of the checkout was imported here.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from acklab.evidence.exitcodes import AcklabError, ExitCode
from acklab.harness.engine.runner import RunOptions
from acklab.harness.engine.runner import run as harness_run
from acklab.harness.errors import RunInterrupted

from .errors import FlowError, FlowSpecInvalid

# The file the served fixture imports as its live handler; its launcher refuses any other.
HANDLER_FILE = Path("app", "webhooks.py")


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
    reason: str | None = None  # why it erred or was skipped (`acklab run --json`)
    latency: Latency | None = None

    def line(self) -> str:
        """``name: verdict (N violations)``, and the reason when there is one."""
        why = f"; {self.reason}" if self.reason else ""
        return f"{self.name}: {self.verdict} ({len(self.violations)} violations{why})"

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "verdict": self.verdict,
            "trials": self.trials,
            "violations": len(self.violations),
            "incident": self.incident,
            "latency": self.latency.as_dict() if self.latency else None,
        } | ({"reason": self.reason} if self.reason else {})


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
    error: str | None = None  # why the run as a whole ended in an error (`acklab run --json`)

    def failing(self) -> list[str]:
        return [n for n, e in self.experiments.items() if e.verdict == "fail"]

    def errored(self) -> list[str]:
        return [n for n, e in self.experiments.items() if e.verdict == "error"]


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (no interpolation: a reported p95 is a latency that happened)."""
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return round(ordered[rank - 1], 3)


def imported_from(checkout: Path) -> list[str]:
    """Modules of this process loaded from a file inside `checkout` (the lab must have none)."""
    root = checkout.resolve()
    found = []
    for name, module in list(sys.modules.items()):
        where = getattr(module, "__file__", None)
        if where and Path(where).resolve().is_relative_to(root):
            found.append(name)
    return sorted(found)


def run_lab(
    checkout: Path,
    *,
    target: str,
    experiments: Sequence[str],
    trials: int,
    seed: int,
    out: Path,
    secrets: Sequence[str] = (),
) -> LabRun:
    """Attack the fixture of `checkout` with `experiments`; FlowError (exit 4) when the lab could not run.

    `secrets` (the flow's tokens) are refused in everything the run writes, like its own.
    """
    options = RunOptions(
        target=target,
        checkout=checkout,
        experiments=tuple(experiments),
        trials=trials,
        seed=seed,
        out=out.resolve(),
        secrets=tuple(secrets),
    )
    try:
        result = harness_run(options)
    except RunInterrupted as exc:
        raise KeyboardInterrupt(str(exc)) from exc
    except AcklabError as exc:
        if exc.exit_code == ExitCode.INVALID_INPUT:
            raise FlowSpecInvalid(f"the lab refused the flow's input: {exc}") from exc
        raise FlowError(f"the lab could not run on {checkout}: {exc}") from exc
    leaked = imported_from(checkout)
    if leaked:
        raise FlowError(
            f"the lab imported code of the checkout under test ({', '.join(leaked[:5])}); "
            "its verdicts cannot be trusted"
        )
    return parse_run(
        result.as_json(),
        checkout=checkout,
        exit_code=int(result.exit_code),
        module=str(checkout.resolve() / HANDLER_FILE),
    )


def parse_run(doc: dict[str, Any], *, checkout: Path, exit_code: int, module: str) -> LabRun:
    """A LabRun from the ``acklab run --json`` object."""
    bundle = doc.get("bundle")
    bundle_path = Path(bundle).resolve() if bundle else None
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
            reason=exp.get("reason") or exp.get("error"),
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
        error=doc.get("error"),
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
