"""What every benchmark reports: a figure measured against its baseline in the same run.

These machines are shared and noisy, so a figure is a ratio or a median of several runs
taken side by side with its baseline, never an absolute time compared with yesterday's.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import sys
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).with_name("results.json")


@dataclass(frozen=True)
class Figure:
    """One measured figure. `met` is None when the figure has no target (informational);
    `value` is None when it could not be measured (the note says why)."""

    name: str
    value: float | None
    unit: str
    baseline: float | None = None
    ratio: float | None = None
    target: str | None = None
    met: bool | None = None
    note: str = ""
    # A figure measured in independent rounds: `value` is the worst round, `median` the median one.
    median: float | None = None
    rounds: int | None = None


def machine() -> dict[str, Any]:
    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "processor": platform.machine(),
    }


def versions() -> dict[str, str]:
    found = {}
    for name in ("acklab", "fastapi", "sqlalchemy", "httpx", "uvicorn", "psycopg", "hypothesis"):
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            continue
    return found


def write_results(figures: list[Figure], path: Path = RESULTS, **extra: Any) -> Path:
    """Write `{"machine", "versions", "figures", ...extra}`; NaN and infinity are refused."""
    doc = {"machine": machine(), "versions": versions(), **extra, "figures": [asdict(f) for f in figures]}
    path.write_text(json.dumps(doc, indent=2, allow_nan=False) + "\n")
    return path


def not_measured(name: str, unit: str, why: str, target: str | None = None) -> Figure:
    """A figure that could not be measured in this run: no value, never a fake one."""
    return Figure(name, None, unit, target=target, met=None, note=f"not measured: {why}")


def print_figure(figure: Figure) -> None:
    status = "" if figure.met is None else (" ok" if figure.met else " MISSED")
    ratio = f" (ratio {figure.ratio:.2f})" if figure.ratio is not None else ""
    target = f" target {figure.target}" if figure.target else ""
    value = f"{figure.value:.3f} {figure.unit}" if figure.value is not None else "not measured"
    if figure.rounds is not None and figure.value is not None:
        value = f"{value} (worst of {figure.rounds} rounds; median {figure.median:g} {figure.unit})"
    note = f"  [{figure.note}]" if figure.note else ""
    print(f"{figure.name}: {value}{ratio}{target}{status}{note}", flush=True)


def print_measured(*measures: Callable[..., list[Figure]]) -> None:
    """A module run as a script (``python -m bench.NAME [--quick]``): print what each of `measures` finds."""
    quick = "--quick" in sys.argv[1:]
    for measure in measures:
        for figure in measure(quick=quick):
            print_figure(figure)


def in_scratch(
    prefix: str, measure: Callable[[Path], list[Figure]], env: Mapping[str, str] | None = None
) -> list[Figure]:
    """`measure(root)` in a fresh temporary folder `root` (removed afterwards, whatever happens),
    with `env` set in this process's environment first (what the consumers it starts inherit)."""
    os.environ.update(env or {})
    root = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        return measure(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
