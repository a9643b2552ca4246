"""Experiment spec files (`kind: experiment`) given to `--experiment` in place of a name.

A spec names one stable experiment (`uses`) and may set the trials and the parameters the
run applies (`burst`, `burst_sync`, `max_attempts`, `time_compression`, `overlap_ratio`,
`processing_delay_ms`, `settle_ms`). Parameters are run-wide knobs (harness.core.plan.RunSettings), so two specs
in one run may not set the same parameter to different values: that is refused (exit 3)
rather than silently letting one win. The incident records the stable experiment name;
its `experiment.parameters` record the values the run used.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from acklab.harness.core.plan import RunSettings
from acklab.harness.errors import SpecError
from acklab.harness.specs.experiment import load_experiment_spec

DEFAULT_TRIALS = 5


def is_spec_path(entry: str) -> bool:
    """An `--experiment` value is a spec file when it names a YAML file or an existing path."""
    return entry.endswith((".yaml", ".yml")) or Path(entry).is_file()


@dataclass(frozen=True)
class ResolvedExperiments:
    """What `--experiment` values and `--trials` come to once spec files are read."""

    names: tuple[str, ...]
    trials: int
    settings: RunSettings


def resolve(
    entries: tuple[str, ...],
    trials: int | None,
    settings: RunSettings,
    *,
    explicit: dict[str, Any] | None = None,
) -> ResolvedExperiments:
    """Turn spec files into stable names, trials and settings; plain names pass through.

    `explicit` holds the parameters given on the command line (e.g. ``{"burst": 8}``): a
    spec that sets one of them to another value is refused, not silently preferred.
    """
    names: list[str] = []
    spec_trials: dict[int, str] = {}
    set_by: dict[str, tuple[Any, str]] = {
        key: (value, f"--{key.replace('_', '-')}") for key, value in (explicit or {}).items()
    }
    for entry in entries:
        if not is_spec_path(entry):
            names.append(entry)
            continue
        path = Path(entry)
        if not path.is_file():
            raise SpecError(
                f"--experiment {entry!r}: no such file; give a stable experiment name or a spec file"
            )
        spec = load_experiment_spec(path)
        names.append(spec.uses)
        if spec.trials is not None:
            spec_trials[spec.trials] = entry
        for key, value in spec.parameters.given().items():
            earlier = set_by.get(key)
            if earlier is not None and earlier[0] != value:
                raise SpecError(
                    f"{entry}: parameters.{key}: got {value!r}, but {earlier[1]} sets {earlier[0]!r}; "
                    "parameters apply to the whole run, so run these specs separately"
                )
            set_by[key] = (value, entry)
    if trials is None:
        if len(spec_trials) > 1:
            listed = ", ".join(f"{n} in {where}" for n, where in spec_trials.items())
            raise SpecError(f"the experiment specs ask for different trials ({listed}); pass --trials N")
        trials = next(iter(spec_trials), DEFAULT_TRIALS)
    overrides = {key: value for key, (value, _) in set_by.items()}
    return ResolvedExperiments(tuple(names), trials, dataclasses.replace(settings, **overrides))
