"""The repair story for `make demo`: sandbox, recipe repair with delegated approvals, before and after.

What it runs is what a person would type (shown as it goes)::

    acklab flow sandbox DIR
    cd DIR && acklab flow run flows/repair.yaml --local --decisions DECISIONS --trials 1

then prints, from the trail, every experiment on the head and on the patch, and the commit
the flow made on its branch.
"""

from __future__ import annotations

import json
import subprocess  # nosec B404
import sys
import tempfile
from pathlib import Path

import click
import yaml

from acklab.evidence.documents.trail import LabLatency, LabRunOutputs, StrikeComparison, TrailDocument
from acklab.evidence.loading import load_evidence_json

from .scratch_repo import make_scratch_repo
from .worktree import git

DECISIONS = [
    {
        "gate": "approve",
        "decision": "approve",
        "actor": "release-bot",
        "delegated_by": "alice",
        "reason": "alice delegated approval of recipe repairs in the sandbox to release-bot",
    },
    {
        "gate": "approve-gap",
        "decision": "reject",
        "actor": "alice",
        "reason": "a patch with a known gap is not published in the demo",
    },
]
# This acklab, whatever the working directory holds: the sandbox is a copy of the project, and a
# plain `python -c` there would import the sandbox's packages instead of the lab's own.
_ACKLAB = "import sys; sys.path.insert(0, sys.argv.pop(1)); from acklab.cli import main; main(sys.argv[1:])"


def own_acklab() -> list[str]:
    """argv prefix that runs this installation's `acklab` (``python -I``, its root on sys.path)."""
    package = sys.modules["acklab"]  # this module is acklab.flows.demo: its top package is loaded
    return [sys.executable, "-I", "-c", _ACKLAB, str(Path(str(package.__file__)).resolve().parent.parent)]


def _say(message: str) -> None:
    click.secho(message, bold=True, err=True)


def run_demo(directory: Path | None, *, trials: int = 1, out: Path | None = None) -> int:
    """Run the story; return the flow's exit code."""
    work = Path(tempfile.mkdtemp(prefix="acklab-demo-"))
    sandbox = directory or work / "sandbox"
    _say(f"$ acklab flow sandbox {sandbox}")
    make_scratch_repo(sandbox)
    decisions = work / "decisions.yaml"
    decisions.write_text(yaml.safe_dump(DECISIONS, sort_keys=False), encoding="utf-8")
    _say(f"decisions ({decisions}), each naming its actor and who delegated it:")
    click.echo(decisions.read_text(encoding="utf-8"), err=True)
    argv = ["flow", "run", "flows/repair.yaml", "--local", "--decisions", str(decisions)]
    argv += ["--trials", str(trials), "--json"]
    if out is not None:  # absolute: the flow runs with the sandbox as its working directory
        argv += ["--out", str(out.resolve())]
    _say(f"$ cd {sandbox} && acklab {' '.join(argv)}")
    done = subprocess.run(  # nosec B603
        [*own_acklab(), *argv], cwd=sandbox, stdout=subprocess.PIPE, text=True, check=False
    )
    try:
        result = json.loads(done.stdout)
    except ValueError:
        click.echo(done.stdout, err=True)
        _say(f"the flow printed no result (exit {done.returncode})")
        return done.returncode or 4
    show_before_after(Path(result["trail"]))
    if result.get("published"):
        branch = result["published"]["branch"]
        _say(f"$ git log --oneline -1 {branch} && git diff --stat main {branch}")
        click.echo(git(sandbox, "log", "--oneline", "-1", branch).stdout, err=True, nl=False)
        click.echo(git(sandbox, "diff", "--stat", "main", branch).stdout, err=True, nl=False)
    _say(f"outcome: {result['outcome']} (exit {result['exit_code']}); trail: {result['trail']}")
    return int(result["exit_code"])


def show_before_after(trail_path: Path) -> None:
    """Print every experiment's verdict and latency on the head and on the patch, from the trail."""
    trail = TrailDocument.read(load_evidence_json(trail_path), what=str(trail_path))
    rows: list[tuple[str, str, str, str, str]] = []
    by_name = {c.name: c for c in trail.checkpoints if c.status != "skipped"}
    strike = by_name["strike-again"].outputs if "strike-again" in by_name else {}
    for raw in [*strike.get("aimed", []), *strike.get("experiments", [])]:
        entry = StrikeComparison.read(raw)
        rows.append(
            (
                entry.experiment,
                str(entry.before),
                entry.after,
                _latency(entry.latency_before),
                _latency(entry.latency_after),
            )
        )
    head = LabRunOutputs.within(by_name["reproduce"].outputs) if "reproduce" in by_name else None
    patched = LabRunOutputs.within(by_name["verify"].outputs) if "verify" in by_name else None
    if not rows and head is not None and patched is not None:
        before = {e.name: e for e in head.experiments}
        for e in patched.experiments:
            was = before.get(e.name)
            rows.append(
                (
                    e.name,
                    str(was.verdict if was else None),
                    e.verdict,
                    _latency(was.latency if was else None),
                    _latency(e.latency),
                )
            )
    _say("before (head, unsafe handler) and after (the approved patch):")
    header = ("experiment", "head", "patched", "latency head", "latency patched")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(5)]
    for row in [header, *rows]:
        click.echo("  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)), err=True)


def _latency(value: LabLatency | None) -> str:
    if value is None:
        return "-"
    return f"p50 {value.p50_ms:.1f} / p95 {value.p95_ms:.1f} ms"
