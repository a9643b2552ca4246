"""Run the deeper experiments through the real engine (`harness.engine.runner.run`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from acklab.harness.engine.runner import RunOptions, RunResult, run

RunLab = Callable[..., RunResult]


@pytest.fixture
def run_lab(tmp_path: Path) -> RunLab:
    """`run_lab(target, *experiments, trials=1, db=None)` -> the run's result (bundle under tmp_path)."""

    def _run(
        target: str, *experiments: str, trials: int = 1, db: str | None = None, seed: int = 7, **more: Any
    ) -> RunResult:
        options = RunOptions(
            target=target,
            experiments=experiments,
            trials=trials,
            db=db,
            out=tmp_path / "out",
            seed=seed,
            **more,
        )
        return run(options)

    return _run


def experiment(result: RunResult, name: str) -> dict[str, Any]:
    return next(e for e in result.run["experiments"] if e["name"] == name)


def trials(result: RunResult, name: str) -> list[dict[str, Any]]:
    import json

    return [
        json.loads(path.read_text()) for path in sorted((result.bundle / "trials").glob(f"{name}-*.json"))
    ]
